package proxyvm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"

	"github.com/pveflow/pveflow/workflows/core"
)

func TestOutcomeOf(t *testing.T) {
	tests := []struct {
		name            string
		err             error
		wantOutcome     string
		wantFailureType string
	}{
		{"completed", nil, "completed", ""},
		{"canceled", temporal.NewCanceledError("a DeleteProxy of the same proxy stopped this create"), "canceled", ""},
		{"permanent", core.Permanentf("create proxy: bad uid"), "failed", "Permanent"},
		{"transient", core.Transientf("wait for clone did not finish within its budget"), "failed", "Transient"},
		{"quota", core.Fail("clone", temporal.NewNonRetryableApplicationError("storage full", "QuotaExceeded", nil)), "failed", "QuotaExceeded"},
		{"wrapped", fmt.Errorf("step: %w", temporal.NewApplicationError("gone", "NotFound")), "failed", "NotFound"},
		{"not an application error", errors.New("side effect: decode"), "failed", "Unclassified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outcome, failureType := outcomeOf(tt.err)

			assert.Equal(t, tt.wantOutcome, outcome)
			assert.Equal(t, tt.wantFailureType, failureType)
		})
	}
}
