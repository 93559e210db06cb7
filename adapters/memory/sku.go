package memory

// SKU names one activity SKU.
type SKU struct {
	ActivityID int64
	SKUID      int64
}
