// Package salekit drives a sale the way its users do and checks its
// books: buyers who retry one request id until a definite answer
// (BuyUntilDefinite), an operator who creates the activity through the
// admin API (CreateSaleActivity), payers who pay or cancel a share of the
// orders as they are created (Payer), and the invariant checks of an
// activity at rest (CheckActivityInvariants, StockCheck: I1-I7 against
// PostgreSQL, Redis through the stock report, and every buyer's
// answers). It also holds the small probes and figures the commands share
// (WaitReady, ScrapeGauges, WaitGone, Median, Latencies, IntList).
//
// The chaos runs, the cluster sale and the sale benchmark use it; it
// talks to a running service only through its public and admin APIs,
// its operations listener and PostgreSQL.
package salekit
