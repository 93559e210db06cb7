// Package ports declares the interfaces between the application core and
// the outside world, and the small value types and error vocabulary they
// exchange.
//
// Driven ports (implemented by adapters, used by the application): the
// PostgreSQL unit of work and its stores (UnitOfWork, Tx), the Redis
// reservation store and its scanner index (Reservations, Admission,
// Activities, Backlog, OrderViews), the broker (Publisher, and BatchHandler
// for consumers), Clock and IDGenerator. Driving ports (implemented by the
// application, used by the Connect adapter): OrderService and AdminService.
//
// Every method takes a context first. Each interface documents its
// contract: idempotency, ordering and concurrency guarantees, and which
// sentinel errors it returns. Errors are matched with errors.Is/As, never by
// type switches or strings.
//
// The package imports only the standard library and domain packages.
package ports
