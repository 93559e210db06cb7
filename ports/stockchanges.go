package ports

// StockChangeStore records the stock changes of StockOperations in
// PostgreSQL (see StockOperations for the guarantees).
type StockChangeStore interface{}
