package application

import "testing"

// TestCreateOutcomeLabels: decisions, logs and metrics carry these labels;
// they must not change with the type.
func TestCreateOutcomeLabels(t *testing.T) {
	for o, want := range map[createOutcome]string{
		outcomeDuplicate: "duplicate",
		outcomeCreated:   "created",
		outcomeRejected:  "rejected",
	} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(o), got, want)
		}
	}
}
