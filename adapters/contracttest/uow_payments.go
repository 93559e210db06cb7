package contracttest

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// testPaymentIDConfirmsOneOrder: once an order holds a payment id, moving
// a second order to that payment id fails with ErrPaymentIDReused and
// changes nothing (the transaction fails); the first order may be
// updated with its own payment id again.
func testPaymentIDConfirmsOneOrder(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	act, sku := randomID(), randomID()
	payment := "pay-" + uniq()
	first := saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), act, sku, 1, baseTime), func(o *order.Order) error {
		return o.Pay(payment, baseTime.Add(time.Minute))
	})
	second := orderCreatedAt(t, "ord_"+uniq(), act, sku, 2, baseTime)
	saveOrder(t, uow, second, nil)
	noErr(t, "pay the second order", second.Pay(payment, baseTime.Add(time.Minute)))
	err := uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		return tx.UpdateOrders(ctx, []order.Snapshot{second.Snapshot()})
	})
	wantErr(t, "a payment id reused for another order", err, ports.ErrPaymentIDReused)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		// The first order again with its own payment id is no conflict.
		return tx.UpdateOrders(ctx, []order.Snapshot{first})
	})
}
