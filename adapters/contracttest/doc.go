// Package contracttest holds the shared contract test suites of the driven
// ports, in the style of Watermill's pubsub tests: each suite is a function
// taking the *testing.T and a factory that builds the adapter under test,
// and checks only what the port's doc comments promise. The in-memory
// adapters (adapters/memory) and the real PostgreSQL and Redis adapters run
// the same suites from their own tests, for example:
//
//	func TestUnitOfWorkContract(t *testing.T) {
//		contracttest.UnitOfWork(t, func(t *testing.T) (ports.UnitOfWork, ports.OrderQueries) {
//			s := newIsolatedStore(t) // a fresh, empty database
//			return s, s
//		})
//	}
//
// Every subtest calls the factory once and expects a fresh, isolated, empty
// adapter; the suites nevertheless use random ids, so a store shared by
// subtests only weakens the checks that count rows (ClaimOutbox, Stats).
// The suites are deterministic: they never sleep, they pass explicit times
// where a port takes times as arguments, and they drive the only
// adapter-side clock they rely on (the token bucket of Admission) through
// ReservationsConfig.Now. Concurrency checks start goroutines that the
// suite waits for.
//
// The package imports only the standard library, domain packages and
// ports, so any adapter's tests may import it.
package contracttest
