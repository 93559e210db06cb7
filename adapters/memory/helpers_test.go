package memory_test

import "time"

// start is the fake clocks' initial time in these tests.
var start = time.Date(2030, time.March, 1, 12, 0, 0, 0, time.UTC)
