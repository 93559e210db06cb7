// Package hotsku is `seckill-bench hot-sku`: how stock lanes spread one
// SKU's reservations over the masters of the local stack's Redis
// Cluster. For each lane count it runs the reserve ceiling
// (reserveceiling.Measure, every call a new buyer of one SKU) in
// interleaved rounds and prints the calls per second and the CPU per call
// of the busiest master and of all masters (INFO cpu).
//
// Run is the command; nothing else is exported.
package hotsku
