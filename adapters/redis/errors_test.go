package redis

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/ports"
)

func TestConnectionFailuresAreTransient(t *testing.T) {
	t.Parallel()
	// Port 1 on loopback refuses connections.
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, s: s, c: c}
	_, err = s.Reserve(ctxT(t), f.newRsv(1, 1, 1, testBase), testBase)
	wantErr(t, err, ports.ErrTransient)
	_, err = s.Get(ctxT(t), ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: "x"})
	wantErr(t, err, ports.ErrTransient)
}

func TestServerErrorsAreNotTransient(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	// A reservation key of the wrong type makes the script fail.
	sk := f.s.keys.slot(1, 1)
	f.seed(1, 1, 1)
	r := f.newRsv(1, 1, 1, testBase)
	f.c.Set(ctx, sk.rsv(r.ReservationID), "not a hash", 0)
	_, err := f.s.Reserve(ctx, r, testBase)
	if err == nil || errors.Is(err, ports.ErrTransient) {
		t.Fatalf("Reserve over a wrong-type key = %v, want a non-transient error", err)
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("error %v does not wrap the server's error", err)
	}
}
