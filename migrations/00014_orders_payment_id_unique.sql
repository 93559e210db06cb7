-- A payment id confirms one order only: the payment side's confirmation of
-- one order can never be replayed against another (PayOrder answers
-- AlreadyExists, reason PAYMENT_ID_REUSED). Only orders that hold a payment
-- id are indexed. adapters/postgres maps a violation of this index to
-- ports.ErrPaymentIDReused.

-- +goose Up
CREATE UNIQUE INDEX orders_payment_id_key
    ON orders (payment_id)
    WHERE payment_id IS NOT NULL;

-- +goose Down
DROP INDEX orders_payment_id_key;
