// Package prometheus holds the Prometheus recording and alerting rules of the
// service (rules.yml) and their promtool unit tests (tests/*.yml). It has no
// Go code of its own: its tests run promtool on the rules and check that every
// alert has a firing and a silent test case. README.md describes the alerts.
package prometheus
