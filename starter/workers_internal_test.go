package starter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestPollersOf_aWorkerThatStoppedPollingLongerThanAPollLastsIsNoPoller(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	polled := func(ago time.Duration) *taskqueuepb.PollerInfo {
		return &taskqueuepb.PollerInfo{LastAccessTime: timestamppb.New(now.Add(-ago))}
	}
	tests := []struct {
		name    string
		pollers []*taskqueuepb.PollerInfo
		want    Workers
	}{
		{"none listed", nil, Workers{TaskQueue: "q"}},
		{"one in a long poll", []*taskqueuepb.PollerInfo{polled(50 * time.Second)}, Workers{TaskQueue: "q", Pollers: 1, LastPoll: now.Add(-50 * time.Second)}},
		{"one gone for two minutes", []*taskqueuepb.PollerInfo{polled(2 * time.Minute)}, Workers{TaskQueue: "q", LastPoll: now.Add(-2 * time.Minute)}},
		{"one gone, one polling", []*taskqueuepb.PollerInfo{polled(3 * time.Minute), polled(time.Second)}, Workers{TaskQueue: "q", Pollers: 1, LastPoll: now.Add(-time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, pollersOf("q", tt.pollers, now))
		})
	}
}
