package devserver

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/server/api/adminservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// settleTimeout bounds how long a server that joins a cluster waits for it to settle before it
// reports itself up anyway.
const settleTimeout = 30 * time.Second

// awaitSettled waits until a server that joined a cluster is part of it everywhere: the
// frontends at own and peer (the cluster's address) see the same hosts in their history and
// matching rings, this server's history host among them, and each history shard is held by the
// host the ring gives it. Until then the hosts hand shards to each other, and a workflow started
// meanwhile can lose a task to a shard closed under it: its first create once waited 45 to 60 s,
// until the history service's periodic shard acquisition (once a minute) took the shard again.
// A peer that does not answer (it is down) is left out: there is nothing to agree with.
// It returns what is still unsettled when ctx ends.
func awaitSettled(ctx context.Context, own, peer, history string) error {
	clients := map[string]adminservice.AdminServiceClient{}
	for _, address := range []string{own, peer} {
		conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("admin client of %s: %w", address, err)
		}
		defer conn.Close()
		clients[address] = adminservice.NewAdminServiceClient(conn)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		unsettled := settled(ctx, clients, own, peer, history)
		if unsettled == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster had not settled after %s: %s", settleTimeout, unsettled)
		case <-tick.C:
		}
	}
}

// settled says what keeps the cluster from being settled (awaitSettled), or "" when nothing does.
func settled(ctx context.Context, clients map[string]adminservice.AdminServiceClient, own, peer, history string) string {
	ask := func(address string) (map[string][]string, int32, error) {
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		resp, err := clients[address].DescribeCluster(callCtx, &adminservice.DescribeClusterRequest{})
		if err != nil {
			return nil, 0, err
		}
		rings := map[string][]string{}
		for _, ring := range resp.GetMembershipInfo().GetRings() {
			for _, host := range ring.GetMembers() {
				rings[ring.GetRole()] = append(rings[ring.GetRole()], host.GetIdentity())
			}
			slices.Sort(rings[ring.GetRole()])
		}
		return rings, resp.GetHistoryShardCount(), nil
	}
	mine, shards, err := ask(own)
	if err != nil {
		return fmt.Sprintf("this server's frontend %s: %v", own, err)
	}
	if !slices.Contains(mine["history"], history) {
		return fmt.Sprintf("this server's history host %s is not in its own history ring %v", history, mine["history"])
	}
	if theirs, _, err := ask(peer); err == nil {
		for _, role := range []string{"history", "matching"} {
			if !slices.Equal(mine[role], theirs[role]) {
				return fmt.Sprintf("the %s rings differ: %v here, %v at %s", role, mine[role], theirs[role], peer)
			}
		}
	}
	for shard := int32(1); shard <= shards; shard++ {
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := clients[own].DescribeHistoryHost(callCtx, &adminservice.DescribeHistoryHostRequest{ShardId: shard})
		cancel()
		if err != nil {
			return fmt.Sprintf("history shard %d: %v", shard, err)
		}
		if !slices.Contains(resp.GetShardIds(), shard) {
			return fmt.Sprintf("history shard %d is not yet held by %s, the host its ring gives it", shard, resp.GetAddress())
		}
	}
	return ""
}
