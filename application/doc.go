// Package application holds the use cases of the flash-sale order service,
// one file each: PlaceOrder (hot path), CreateOrders (order-create
// consumer), PayOrder/CancelOrder and CancelExpiredOrders (life cycle),
// CompensateReservations (stock release), ResendPending (scanner),
// RelayOutbox, the query and admin services, and the backlog gate.
//
// The package depends only on domain and ports. It never talks to a
// database, Redis or the broker directly; every effect goes through a port
// whose contract (idempotency, atomicity, errors) is documented there.
package application
