//go:build linux

package e2e_test

import (
	"encoding/hex"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/testserver"
	"github.com/pveflow/pveflow/workflows/proxyvm"
)

// TestCluster_aCreateAndDeleteSurviveAServerProcessKilledMidCreate runs the topology of make
// cluster: PostgreSQL, Temporal's schemas set up by pveflow-temporal sql-tool, and two
// pveflow-temporal -postgres processes as one cluster. Mid-clone it SIGKILLs the process that
// owns the history shard, and the other takes the shard over: the create completes without a
// second clone, and so does the delete, leaving nothing behind.
//
// The cluster has one history shard, so every workflow of the proxy is on the shard of the
// killed process. The test's client and worker reach both frontends (TEMPORAL_ADDRESS lists
// both, as make cluster sets it), so they live through either kill.
func TestCluster_aCreateAndDeleteSurviveAServerProcessKilledMidCreate(t *testing.T) {
	began := time.Now()
	tc := startTemporalCluster(t, 1, client.Options{})
	first, second, pgPort := tc.servers[0], tc.servers[1], tc.postgres.Port
	servers := map[string]*testserver.Server{first.HistoryAddress(): first, second.HistoryAddress(): second}
	t.Logf("PostgreSQL, schemas and two servers up in %s", time.Since(began).Round(time.Millisecond))

	c := tc.dial(t, nil)
	cluster := newCluster(func(o *pvesim.Options) { o.TaskDurations = map[string]time.Duration{"qmclone": 4 * time.Second} })
	// The product's budgets, not the fast tests' (a 20 s agent wait): a wait's activity whose
	// task went to the killed server's matching service is dispatched again only once the
	// cluster has found that server gone, which took the create 19 s in one CI run.
	cfg := fastConfig(t)
	cfg.Budgets = config.Default().Budgets
	s := newStackOnClient(t, c, first.Namespace(), cluster, cfg, client.Options{})
	s.startWorker()

	req := s.startCreate(createInput(uid))
	eventually(t, "the create polls its clone", func() bool { return cluster.CallCount("TaskStatus") > 0 })
	owner := shardOwner(t, pgPort)
	victim, ok := servers[owner]
	require.True(t, ok, "the shard's owner %q is neither server's history (%s, %s)", owner, first.HistoryAddress(), second.HistoryAddress())
	survivor, which := first, "second"
	if victim == first {
		survivor, which = second, "first"
	}
	t.Logf("killing the %s server, whose history service %s owns the shard", which, owner)
	victim.Kill()
	killed := time.Now()

	res, err := served[proxyvm.CreateProxyResult](t, req)

	require.NoError(t, err)
	t.Logf("the create was served %s after the kill", time.Since(killed).Round(time.Millisecond))
	assert.Equal(t, survivor.HistoryAddress(), shardOwner(t, pgPort), "the surviving server owns the shard")
	assert.Equal(t, 1, cluster.CallCount("Clone"), "the clone was dispatched once")
	assert.NotEmpty(t, res.IPv4)

	del, err := served[proxyvm.DeleteProxyResult](t, s.startDelete(proxyvm.DeleteProxyInput{UID: uid}))
	require.NoError(t, err)
	assert.Len(t, del.Destroyed, 1)
	assert.Empty(t, leftovers(cluster))
	t.Logf("the whole test took %s", time.Since(began).Round(time.Millisecond))
}

// BenchmarkCluster_hundredProxiesCreatedAndDeletedAtOnce is the fleet benchmark's hundred
// proxies (measureFleet) on make cluster's topology: PostgreSQL and two server processes with
// make cluster's four history shards, the worker and the client reaching both frontends. The
// server's cores are the cluster's: both servers and PostgreSQL.
func BenchmarkCluster_hundredProxiesCreatedAndDeletedAtOnce(b *testing.B) {
	withAndWithoutAdmission(b, func(b *testing.B, perStorage int) {
		for b.Loop() {
			reportFleet(b, runsOfFleet(100), func(tb testing.TB) fleetFigures {
				tc := startTemporalCluster(tb, 4, client.Options{Logger: warnings(b)})
				cluster := fleetCluster()
				s := newStackOnClient(tb, tc.dial(tb, warnings(b)), tc.servers[0].Namespace(), cluster, fleetConfig(tb, perStorage), client.Options{})
				s.serverCPU = tc.CPU
				s.startWorker()
				return measureFleet(tb, s, cluster, 100)
			})
		}
	})
}

// temporalCluster is the topology of make cluster: PostgreSQL, Temporal's schemas set up by
// pveflow-temporal sql-tool, and two pveflow-temporal -postgres processes as one cluster.
type temporalCluster struct {
	postgres testserver.Postgres
	servers  []*testserver.Server
}

// startTemporalCluster starts a cluster of shards history shards for t, whose servers' own
// clients are made with base; it stops when t ends.
func startTemporalCluster(t testing.TB, shards int, base client.Options) temporalCluster {
	t.Helper()
	tc := temporalCluster{postgres: testserver.StartPostgres(t)}
	testserver.SetUpTemporalSchema(t, tc.postgres.Port)
	pg, clients := testserver.WithPostgres("127.0.0.1", tc.postgres.Port), testserver.WithBaseClientOptions(base)
	// The first records the cluster in the database; the second joins it.
	first := testserver.New(t, pg, clients, testserver.WithArgs("-history-shards", strconv.Itoa(shards)))
	second := testserver.New(t, pg, clients, testserver.WithArgs("-history-shards", strconv.Itoa(shards), "-cluster-address", first.Address()))
	tc.servers = []*testserver.Server{first, second}
	return tc
}

// dial is a client of the cluster that reaches both frontends, as make cluster's worker does.
func (tc temporalCluster) dial(t testing.TB, logger log.Logger) client.Client {
	t.Helper()
	return testserver.DialFrontends(t, tc.servers[0].Namespace(), logger, tc.servers[0].Address(), tc.servers[1].Address())
}

// CPU is the processor time the cluster's processes have used so far: both servers, and
// PostgreSQL with its backends, which do what the embedded server's SQLite does in its process.
func (tc temporalCluster) CPU() (time.Duration, error) {
	total, err := testserver.ProcessTreeCPU(tc.postgres.Pid)
	for _, server := range tc.servers {
		cpu, serverErr := server.CPU()
		total, err = total+cpu, errors.Join(err, serverErr)
	}
	return total, err
}

// shardOwner is the address of the history service that owns history shard 1, as the shard's
// record in the database names it: its ShardInfo's owner (field 3), "<address>-<sequence>-<uuid>".
func shardOwner(t testing.TB, port int) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(testserver.PostgresBin(t), "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "temporal", "-d", "temporal",
		"-Atc", "SELECT encode(data, 'hex') FROM shards WHERE shard_id = 1").CombinedOutput()
	require.NoError(t, err, "psql: %s", out)
	data, err := hex.DecodeString(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		require.GreaterOrEqual(t, n, 0, "shard 1's record is no ShardInfo")
		data = data[n:]
		if num == 3 && typ == protowire.BytesType {
			owner, _ := protowire.ConsumeBytes(data)
			address, _, _ := strings.Cut(string(owner), "-")
			return address
		}
		n = protowire.ConsumeFieldValue(num, typ, data)
		require.GreaterOrEqual(t, n, 0, "shard 1's record is no ShardInfo")
		data = data[n:]
	}
	require.FailNow(t, "shard 1's record names no owner")
	return ""
}
