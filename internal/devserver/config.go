package devserver

import (
	"net"
	"strconv"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
)

const clusterName = "active"

// ports are where the server's services and the UI listen.
type ports struct {
	frontend, frontendHTTP, history, matching, worker, ui int
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
	service := func(port int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: ip}}
	}
	frontend := service(p.frontend)
	frontend.RPC.HTTPPort = p.frontendHTTP
	return &config.Config{
		Persistence: config.Persistence{
			DefaultStore:     sqliteplugin.PluginName,
			VisibilityStore:  sqliteplugin.PluginName,
			NumHistoryShards: 1,
			DataStores:       map[string]config.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
		},
		ClusterMetadata: &cluster.Config{
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {
					Enabled:                true,
					InitialFailoverVersion: 1,
					RPCAddress:             hostPort(ip, p.frontend),
					HTTPAddress:            hostPort(ip, p.frontendHTTP),
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
