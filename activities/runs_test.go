package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/activities"
)

// runs stands for Temporal's side: one run, as a test sets it.
type runs struct{ run activities.RunInfo }

func (r runs) DescribeRun(context.Context, string, string) (activities.RunInfo, error) {
	return r.run, nil
}

func TestDescribeRun(t *testing.T) {
	started := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	running := activities.RunInfo{RunID: "r1", Running: true, StartedAt: started}
	closed := activities.RunInfo{RunID: "r1", StartedAt: started}
	tests := []struct {
		name          string
		runs          activities.Runs
		waitClosed    bool
		want          activities.RunInfo
		wantType      string
		wantRetryable bool
	}{
		{"a running run", runs{running}, false, running, "", false},
		{"a closed run", runs{closed}, true, closed, "", false},
		{"a wait for a run that runs polls", runs{running}, true, activities.RunInfo{}, activities.ErrNotReady, true},
		{"a worker without Runs", nil, false, activities.RunInfo{}, activities.ErrPermanent, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.acts.Runs = tt.runs
			var got activities.RunInfo

			err := f.run(t, f.acts.DescribeRun, &got, activities.DescribeRunRequest{WorkflowID: "proxy/u/delete", WaitClosed: tt.waitClosed})

			if tt.wantType == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			appErr := appError(t, err)
			assert.Equal(t, tt.wantType, appErr.Type())
			assert.Equal(t, tt.wantRetryable, !appErr.NonRetryable())
			assert.Contains(t, appErr.Message(), "proxy/u/delete")
		})
	}
}
