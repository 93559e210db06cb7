// Package benchevents is `seckill-bench events`: the event subscription
// (EventService.Subscribe). It fills a scratch store with paid orders'
// events through the write path and sequences them, then measures a
// subscriber reading from position 0 to the head (directly on
// application.EventSubscriptions and over gRPC), the time from commit to
// a live subscriber while orders are written at a steady rate, and
// PlaceOrder's rate (benchplace.Level) with live subscribers beside none.
// Every stream is checked: positions strictly increasing, nothing
// missing. The command ends with a JSON line of its figures.
//
// Run is the command; nothing else is exported.
package benchevents
