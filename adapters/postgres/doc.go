// Package postgres is the PostgreSQL adapter: the unit of work and the
// stores of ports.Tx (inbox, order event store with its projection, final
// stock, inventory ledger, outbox, rejections, quarantine, activities), the
// order query (ports.OrderQueries) and the schema migrator.
//
// Store is built by Open on a pgx connection pool. Store.InTx runs one READ
// COMMITTED transaction and hands the callback a ports.Tx whose methods each
// cost one statement (batches use arrays: unnest / ANY), so a batch of about
// fifty messages costs a handful of round trips. Errors worth retrying match
// ports.ErrTransient (see classify); the driver's error stays reachable with
// errors.As.
//
// The schema lives in the migrations package and is applied by Migrator
// (goose Provider, PostgreSQL advisory session lock, so several processes
// may run Up at once). Design choices and measured figures are in README.md
// next to this file.
package postgres
