// Package clustersale is `seckill-bench cluster-sale`: a hot-SKU sale on
// the distributed shape (several API instances behind a client-side
// spread, worker instances, the stack's Redis Cluster with the SKU's
// stock split over lanes, the RocketMQ cluster mode's two brokers) with
// an API instance, a worker instance and a broker killed mid-sale and
// brought back. It checks the invariants of the activity at rest, that
// every instance did a share of the work, and reports Redis per master and
// CPU per accepted order by process.
package clustersale
