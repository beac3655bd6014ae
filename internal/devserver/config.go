package devserver

import (
	"net"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/membership/static"
	postgresplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
)

const clusterName = "active"

// The data stores of a server on PostgreSQL, as in Temporal's config/development-postgres12.yaml.
const (
	postgresStore           = "postgres-default"
	postgresVisibilityStore = "postgres-visibility"
)

// ports are where the server's services and the UI listen. The membership ports are those of
// the services' ringpop, with PostgreSQL only: a server on SQLite is alone, with static hosts.
type ports struct {
	frontend, frontendHTTP, history, matching, worker, ui int

	frontendMembership, historyMembership, matchingMembership, workerMembership int
}

// servicePorts are the ports that Options.ServicePorts numbers, in its order: base, base+1, ...
func (p *ports) servicePorts() []*int {
	return []*int{&p.frontendHTTP, &p.history, &p.matching, &p.worker,
		&p.frontendMembership, &p.historyMembership, &p.matchingMembership, &p.workerMembership}
}

// postgresConfig is the connection to one of the server's two databases on PostgreSQL.
func postgresConfig(pg *Postgres, database string) *config.SQL {
	return &config.SQL{
		PluginName:      postgresplugin.PluginName,
		DatabaseName:    database,
		ConnectAddr:     hostPort(pg.Host, pg.Port),
		ConnectProtocol: "tcp",
		User:            pg.User,
		Password:        pg.Password,
		MaxConns:        20,
		MaxIdleConns:    20,
	}
}

// sqliteConfig opens file in write-ahead-log mode with synchronous=normal: with SQLite's
// defaults every commit waits for an fsync, which caps the server at a third of the activity
// rate. A crash can then lose the last commits, never the file.
func sqliteConfig(file string) *config.SQL {
	return &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: file,
		ConnectAttributes: map[string]string{
			"mode":         "rwc",
			"journal_mode": "wal",
			"synchronous":  "normal",
		},
	}
}

// serverConfig configures a single-host cluster with one history shard whose services listen
// on ip.
func serverConfig(ip string, p ports, sqlCfg *config.SQL) *config.Config {
	return baseConfig(ip, p, config.Persistence{
		DefaultStore:     sqliteplugin.PluginName,
		VisibilityStore:  sqliteplugin.PluginName,
		NumHistoryShards: 1,
		DataStores:       map[string]config.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
	}, hostPort(ip, p.frontend), hostPort(ip, p.frontendHTTP))
}

// postgresServerConfig configures one host of a cluster on PostgreSQL: its services find the
// other hosts' through ringpop, which learns where they are from the database and gossips on
// the membership ports, at ip. Every host of the cluster must name the same cluster address,
// or each would rewrite the cluster's record with its own at start.
func postgresServerConfig(ip string, p ports, pg *Postgres) *config.Config {
	cfg := baseConfig(ip, p, config.Persistence{
		DefaultStore:     postgresStore,
		VisibilityStore:  postgresVisibilityStore,
		NumHistoryShards: int32(pg.HistoryShards),
		DataStores: map[string]config.DataStore{
			postgresStore:           {SQL: postgresConfig(pg, pg.Database)},
			postgresVisibilityStore: {SQL: postgresConfig(pg, pg.VisibilityDatabase)},
		},
	}, pg.ClusterAddress, "")
	cfg.Global.Membership = config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: ip}
	for name, port := range map[primitives.ServiceName]int{
		primitives.FrontendService: p.frontendMembership,
		primitives.HistoryService:  p.historyMembership,
		primitives.MatchingService: p.matchingMembership,
		primitives.WorkerService:   p.workerMembership,
	} {
		svc := cfg.Services[string(name)]
		svc.RPC.MembershipPort = port
		cfg.Services[string(name)] = svc
	}
	return cfg
}

// baseConfig is the configuration of both kinds of server: their services listen on ip, and the
// cluster's record names clusterRPC and clusterHTTP as its addresses.
func baseConfig(ip string, p ports, persistence config.Persistence, clusterRPC, clusterHTTP string) *config.Config {
	service := func(port int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: ip}}
	}
	frontend := service(p.frontend)
	frontend.RPC.HTTPPort = p.frontendHTTP
	return &config.Config{
		Persistence: persistence,
		ClusterMetadata: &cluster.Config{
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {
					Enabled:                true,
					InitialFailoverVersion: 1,
					RPCAddress:             clusterRPC,
					HTTPAddress:            clusterHTTP,
				},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services: map[string]config.Service{
			string(primitives.FrontendService): frontend,
			string(primitives.HistoryService):  service(p.history),
			string(primitives.MatchingService): service(p.matching),
			string(primitives.WorkerService):   service(p.worker),
		},
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{
			Archival: config.ArchivalNamespaceDefaults{
				History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
				Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
			},
		},
		PublicClient: config.PublicClient{HostPort: hostPort(ip, p.frontend)},
	}
}

// staticHosts tells each service where the others are, in place of the gossip membership a
// cluster of several hosts needs.
func staticHosts(ip string, p ports) map[primitives.ServiceName]static.Hosts {
	return map[primitives.ServiceName]static.Hosts{
		primitives.FrontendService: static.SingleLocalHost(hostPort(ip, p.frontend)),
		primitives.HistoryService:  static.SingleLocalHost(hostPort(ip, p.history)),
		primitives.MatchingService: static.SingleLocalHost(hostPort(ip, p.matching)),
		primitives.WorkerService:   static.SingleLocalHost(hostPort(ip, p.worker)),
	}
}

func hostPort(ip string, port int) string {
	return net.JoinHostPort(ip, strconv.Itoa(port))
}
