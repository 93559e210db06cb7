-- Final stock per activity SKU, spread over stock_buckets rows ("buckets").
--
-- A transaction that takes stock locks one bucket row until it commits; with
-- several buckets, concurrent order transactions of one hot SKU commit in
-- parallel instead of queueing on one row lock (measured in
-- adapters/postgres/README.md). Every bucket is >= 0 (CHECK and the
-- conditional updates below), so the sum never goes below zero (I1).
-- fillfactor leaves room for HOT updates of these constantly updated rows.

-- +goose Up
CREATE TABLE sku_stock (
    activity_id bigint  NOT NULL,
    sku_id      bigint  NOT NULL,
    bucket      integer NOT NULL CHECK (bucket >= 0),
    available   bigint  NOT NULL CHECK (available >= 0),
    PRIMARY KEY (activity_id, sku_id, bucket),
    FOREIGN KEY (activity_id, sku_id) REFERENCES activities (activity_id, sku_id)
) WITH (fillfactor = 50);

-- take_stock takes up to p_n units of an activity SKU's final stock and
-- returns how many it took (0..p_n), or NULL when the SKU is unknown.
-- 1. Fast path, no waiting: a bucket holding >= p_n that no other
--    transaction has locked, probing from a random start.
-- 2. Otherwise wait for one bucket (the first from the random start that
--    held >= p_n in this statement's snapshot); READ COMMITTED re-checks
--    the condition on the newest row version once the lock is granted.
-- 3. Otherwise (no bucket covers p_n alone: nearly sold out) drain buckets
--    in ascending bucket order, taking what each has.
-- Steps 1 and 2 run in subtransactions that are rolled back when they take
-- nothing: a row that fails the re-check stays locked by its subtransaction
-- and the rollback releases it. So a transaction waits for a bucket only
-- while it holds no other bucket of the SKU (step 2) or while it holds
-- lower buckets only (step 3): transactions taking stock cannot deadlock
-- on one SKU. Call take_stock at most once per SKU per transaction, and
-- for several SKUs in a fixed order.
-- +goose StatementBegin
CREATE FUNCTION take_stock(p_activity_id bigint, p_sku_id bigint, p_n bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_buckets   integer;
    v_start     integer;
    v_bucket    integer;
    v_available bigint;
    v_take      bigint;
    v_granted   bigint := 0;
BEGIN
    SELECT a.stock_buckets INTO v_buckets
    FROM activities a
    WHERE a.activity_id = p_activity_id AND a.sku_id = p_sku_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_n <= 0 THEN
        RETURN 0;
    END IF;
    v_start := floor(random() * v_buckets)::integer;

    IF v_buckets > 1 THEN
        BEGIN
            UPDATE sku_stock s
            SET available = s.available - p_n
            WHERE s.activity_id = p_activity_id AND s.sku_id = p_sku_id
              AND s.bucket = (
                  SELECT c.bucket FROM sku_stock c
                  WHERE c.activity_id = p_activity_id AND c.sku_id = p_sku_id
                    AND c.available >= p_n
                  ORDER BY c.bucket < v_start, c.bucket
                  LIMIT 1
                  FOR UPDATE SKIP LOCKED);
            IF FOUND THEN
                RETURN p_n;
            END IF;
            RAISE SQLSTATE 'SKRTY';
        EXCEPTION WHEN SQLSTATE 'SKRTY' THEN
            NULL;
        END;
    END IF;

    SELECT c.bucket INTO v_bucket FROM sku_stock c
    WHERE c.activity_id = p_activity_id AND c.sku_id = p_sku_id
      AND c.available >= p_n
    ORDER BY c.bucket < v_start, c.bucket
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            UPDATE sku_stock s
            SET available = s.available - p_n
            WHERE s.activity_id = p_activity_id AND s.sku_id = p_sku_id
              AND s.bucket = v_bucket AND s.available >= p_n;
            IF FOUND THEN
                RETURN p_n;
            END IF;
            RAISE SQLSTATE 'SKRTY';
        EXCEPTION WHEN SQLSTATE 'SKRTY' THEN
            NULL;
        END;
    END IF;

    FOR v_bucket, v_available IN
        SELECT c.bucket, c.available FROM sku_stock c
        WHERE c.activity_id = p_activity_id AND c.sku_id = p_sku_id
          AND c.available > 0
        ORDER BY c.bucket
        FOR UPDATE
    LOOP
        v_take := least(v_available, p_n - v_granted);
        UPDATE sku_stock s
        SET available = s.available - v_take
        WHERE s.activity_id = p_activity_id AND s.sku_id = p_sku_id
          AND s.bucket = v_bucket;
        v_granted := v_granted + v_take;
        EXIT WHEN v_granted = p_n;
    END LOOP;
    RETURN v_granted;
END
$$;
-- +goose StatementEnd

-- return_stock gives p_n units back to one bucket of the SKU and returns
-- false when the SKU is unknown. It prefers a bucket no other transaction
-- holds (one this transaction took from qualifies), so after take_stock it
-- never waits; otherwise it waits for one bucket while holding none.
-- +goose StatementBegin
CREATE FUNCTION return_stock(p_activity_id bigint, p_sku_id bigint, p_n bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_buckets integer;
    v_start   integer;
BEGIN
    SELECT a.stock_buckets INTO v_buckets
    FROM activities a
    WHERE a.activity_id = p_activity_id AND a.sku_id = p_sku_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_start := floor(random() * v_buckets)::integer;
    UPDATE sku_stock s
    SET available = s.available + p_n
    WHERE s.activity_id = p_activity_id AND s.sku_id = p_sku_id
      AND s.bucket = (
          SELECT c.bucket FROM sku_stock c
          WHERE c.activity_id = p_activity_id AND c.sku_id = p_sku_id
          ORDER BY c.bucket < v_start, c.bucket
          LIMIT 1
          FOR UPDATE SKIP LOCKED);
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE sku_stock s
    SET available = s.available + p_n
    WHERE s.activity_id = p_activity_id AND s.sku_id = p_sku_id
      AND s.bucket = (
          SELECT c.bucket FROM sku_stock c
          WHERE c.activity_id = p_activity_id AND c.sku_id = p_sku_id
          ORDER BY c.bucket < v_start, c.bucket
          LIMIT 1);
    RETURN FOUND;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION return_stock(bigint, bigint, bigint);
DROP FUNCTION take_stock(bigint, bigint, bigint);
DROP TABLE sku_stock;
