package redis

import (
	"errors"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ClientOptions configure NewClient. The zero value is usable.
type ClientOptions struct {
	// Cluster selects the cluster client even for a single seed address.
	// NewClient selects it anyway for two or more addresses.
	Cluster bool
	// Password authenticates every connection; empty means none.
	Password string
	// DB is the logical database of a single-node client. Redis Cluster
	// has database 0 only: a cluster client with DB != 0 is an error.
	DB int
	// PoolSize is the connection pool size (per node on a cluster); 0
	// means 64.
	PoolSize int
	// ReadTimeout and WriteTimeout bound one command's socket reads and
	// writes; 0 means one second each.
	ReadTimeout, WriteTimeout time.Duration
	// Guard, when set, is installed as the OnConnect hook: Guard.OnConnect
	// on a single-node client, Guard.OnClusterConnect (a generation per
	// master, a freeze per SKU) on a cluster client.
	Guard *Guard
	// StateReload is how often a cluster client reads the slot map again
	// (CLUSTER SLOTS) besides the redirections that make it reload; 0
	// means DefaultStateReload. A master that dies answers no
	// redirection: until the next reload the client keeps dialing it,
	// even after the cluster promoted its replica.
	StateReload time.Duration
}

// DefaultStateReload is the cluster client's default StateReload: a dead
// master's SKUs reach its promoted replica within about a second of the
// promotion (the driver's own default, 60 s, would keep them failing for
// up to a minute), at the cost of one CLUSTER SLOTS a second per client.
const DefaultStateReload = time.Second

// SplitAddrs splits a comma-separated address list ("h1:p1,h2:p2") into
// its trimmed, non-empty addresses.
func SplitAddrs(list string) []string {
	var out []string
	for a := range strings.SplitSeq(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// NewClient returns the client of the Redis at addrs: a *goredis.Client
// for exactly one address unless o.Cluster is set, a
// *goredis.ClusterClient (addrs are the seed nodes; the client discovers
// the others with CLUSTER SLOTS) for several addresses or when o.Cluster is
// set. The caller owns and closes the client.
//
// The cluster client reads and writes masters only (no replica reads, so
// every read sees the last write), follows MOVED and ASK redirections and
// retries TRYAGAIN, CLUSTERDOWN, LOADING and connection failures, as the
// single-node client retries the latter, and reads the slot map again every
// StateReload, so a replica promoted in a dead master's place is found
// within about that long; a command whose reply was lost
// may therefore run twice, which every script of the adapter tolerates
// (doc.go, "Retries"). It fails for no address and for a cluster with
// DB != 0.
func NewClient(addrs []string, o ClientOptions) (goredis.UniversalClient, error) {
	if len(addrs) == 0 {
		return nil, errors.New("redis: no address")
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 64
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = time.Second
	}
	if len(addrs) == 1 && !o.Cluster {
		opts := &goredis.Options{Addr: addrs[0], Password: o.Password, DB: o.DB, PoolSize: o.PoolSize,
			ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout}
		if o.Guard != nil {
			opts.OnConnect = o.Guard.OnConnect
		}
		return goredis.NewClient(opts), nil
	}
	if o.DB != 0 {
		return nil, errors.New("redis: Redis Cluster has database 0 only")
	}
	if o.StateReload <= 0 {
		o.StateReload = DefaultStateReload
	}
	opts := &goredis.ClusterOptions{Addrs: addrs, Password: o.Password,
		PoolSize: o.PoolSize, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		ClusterStateReloadInterval: o.StateReload}
	if o.Guard != nil {
		opts.OnConnect = o.Guard.OnClusterConnect
	}
	return goredis.NewClusterClient(opts), nil
}
