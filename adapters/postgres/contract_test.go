package postgres_test

import (
	"testing"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestUnitOfWorkContract runs the shared ports.UnitOfWork suite (every
// store of ports.Tx and ports.OrderQueries) against PostgreSQL, each
// subtest on a database of its own.
func TestUnitOfWorkContract(t *testing.T) {
	t.Parallel()
	contracttest.UnitOfWork(t, func(t *testing.T) (ports.UnitOfWork, ports.OrderQueries) {
		s := pgtest.OpenStore(t, pgtest.NewDatabase(t))
		return s, s
	})
}
