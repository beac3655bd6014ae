package devserver

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/server/api/adminservice/v1"
	clusterspb "go.temporal.io/server/api/cluster/v1"
	"google.golang.org/grpc"
)

// frontend answers DescribeCluster with its view of the rings, and DescribeHistoryHost with
// the shards the host its ring gives a shard holds.
type frontend struct {
	adminservice.AdminServiceClient
	down  bool
	rings map[string][]string
	held  map[int32]bool
}

func (f frontend) DescribeCluster(context.Context, *adminservice.DescribeClusterRequest, ...grpc.CallOption) (*adminservice.DescribeClusterResponse, error) {
	if f.down {
		return nil, errors.New("connection refused")
	}
	info := &clusterspb.MembershipInfo{}
	for role, hosts := range f.rings {
		ring := &clusterspb.RingInfo{Role: role}
		for _, h := range hosts {
			ring.Members = append(ring.Members, &clusterspb.HostInfo{Identity: h})
		}
		info.Rings = append(info.Rings, ring)
	}
	return &adminservice.DescribeClusterResponse{MembershipInfo: info, HistoryShardCount: 2}, nil
}

func (f frontend) DescribeHistoryHost(_ context.Context, req *adminservice.DescribeHistoryHostRequest, _ ...grpc.CallOption) (*adminservice.DescribeHistoryHostResponse, error) {
	resp := &adminservice.DescribeHistoryHostResponse{Address: "127.0.0.1:2"}
	if f.held[req.GetShardId()] {
		resp.ShardIds = []int32{req.GetShardId()}
	}
	return resp, nil
}

func TestSettled_aJoiningServerWaitsForOneViewOfTheRingsAndEveryShardHeld(t *testing.T) {
	both := map[string][]string{"history": {"127.0.0.1:1", "127.0.0.1:2"}, "matching": {"127.0.0.1:3", "127.0.0.1:4"}}
	allHeld := map[int32]bool{1: true, 2: true}
	for name, tt := range map[string]struct {
		own, peer frontend
		want      string
	}{
		"settled": {frontend{rings: both, held: allHeld}, frontend{rings: both}, ""},
		"not in its own history ring": {frontend{rings: map[string][]string{"history": {"127.0.0.1:1"}}, held: allHeld}, frontend{rings: both},
			"this server's history host 127.0.0.1:2 is not in its own history ring [127.0.0.1:1]"},
		"the peer does not see it yet": {frontend{rings: both, held: allHeld}, frontend{rings: map[string][]string{"history": {"127.0.0.1:1"}, "matching": {"127.0.0.1:3", "127.0.0.1:4"}}},
			"the history rings differ: [127.0.0.1:1 127.0.0.1:2] here, [127.0.0.1:1] at peer"},
		"matching rings differ": {frontend{rings: both, held: allHeld}, frontend{rings: map[string][]string{"history": both["history"], "matching": {"127.0.0.1:3"}}},
			"the matching rings differ: [127.0.0.1:3 127.0.0.1:4] here, [127.0.0.1:3] at peer"},
		"a shard not yet moved": {frontend{rings: both, held: map[int32]bool{1: true}}, frontend{rings: both},
			"history shard 2 is not yet held by 127.0.0.1:2, the host its ring gives it"},
		"the peer is down": {frontend{rings: both, held: allHeld}, frontend{down: true}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			clients := map[string]adminservice.AdminServiceClient{"own": tt.own, "peer": tt.peer}
			assert.Equal(t, tt.want, settled(context.Background(), clients, "own", "peer", "127.0.0.1:2"))
		})
	}
}
