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

func TestWorkers_noLiveWorkerSaysWhatTellsThatNoneIsLive(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		w    Workers
		want string
	}{
		{"none ever polled", Workers{TaskQueue: "q"}, "no worker polls task queue q"},
		{"the last poll long ago", Workers{TaskQueue: "q", LastPoll: now.Add(-2 * time.Minute)}, "no worker polls task queue q: the last poll was 2m0s ago"},
		{"one listed that took no due task", Workers{TaskQueue: "q", Pollers: 1, LastPoll: now.Add(-40 * time.Second), Unserved: "workflow task"},
			"no worker polls task queue q: none took its workflow task, the last poll was 40s ago"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.False(t, tt.w.Live())
			assert.Equal(t, tt.want, tt.w.NoLiveWorker(now))
		})
	}
}

func TestUnserved_aTaskDueAMomentAgoOrPolledSinceIsServed(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	due := now.Add(-time.Second)

	assert.True(t, unserved(due, due.Add(-time.Minute), now), "due a second ago, no poll since")
	assert.False(t, unserved(due, due.Add(time.Millisecond), now), "a poll since it was due")
	assert.False(t, unserved(now.Add(-100*time.Millisecond), due.Add(-time.Minute), now), "due a moment ago")
}
