// Package grafana holds the Grafana dashboard of the service,
// seckill-overview.json ("seckill: sale overview"). It has no Go code of its
// own: its tests check that the dashboard parses, that its layout fits
// Grafana's 24-column grid, and that every query selects metrics that the
// service's code defines. README.md explains how to import it and what each
// row shows.
package grafana
