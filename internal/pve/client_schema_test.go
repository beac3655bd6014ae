package pve_test

import (
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/pveschema"
)

type recordedRequest struct {
	method, path string
	params       url.Values
}

// requestParams collects a request's fields the way PVE does: the query, plus the form or
// multipart fields of the body; a multipart file part counts as a field holding its file name.
func requestParams(r *http.Request) (url.Values, error) {
	params := r.URL.Query()
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mediaType {
	case "multipart/form-data":
		mr, err := r.MultipartReader()
		if err != nil {
			return nil, err
		}
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return params, nil
			}
			if err != nil {
				return nil, err
			}
			value, err := io.ReadAll(p)
			if err != nil {
				return nil, err
			}
			if p.FileName() != "" {
				value = []byte(p.FileName())
			}
			params.Add(p.FormName(), string(value))
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		for k, vs := range r.PostForm {
			params[k] = append(params[k], vs...)
		}
	}
	return params, nil
}

func TestClient_sendsOnlySchemaParameters(t *testing.T) {
	recorded := make(chan recordedRequest, 1)
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		params, err := requestParams(r)
		if err != nil {
			t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
		}
		recorded <- recordedRequest{r.Method, strings.TrimPrefix(r.URL.EscapedPath(), "/api2/json"), params}
		// Every DTO decodes from null, so one answer serves all calls.
		serveJSON(`{"data":null}`)(w, r)
	})
	var logs bytes.Buffer
	c := newClient(t, ts, func(cfg *pve.ClientConfig) { cfg.Logger = debugLogger(&logs) })
	const (
		node = "pve1"
		vmid = 123456
		upid = pve.UPID("UPID:pve1:000B41E2:0A4D4B24:6B005320:qmclone:9000:pveflow@pve!worker:")
		iso  = "CD001 seed"
	)
	calls := map[string]func(context.Context) error{
		"Version": func(ctx context.Context) error { _, err := c.Version(ctx); return err },
		"NodeStatus": func(ctx context.Context) error {
			_, err := c.NodeStatus(ctx, node)
			return err
		},
		"StorageStatus": func(ctx context.Context) error {
			_, err := c.StorageStatus(ctx, node, "local")
			return err
		},
		"ClusterResources": func(ctx context.Context) error { _, err := c.ClusterResources(ctx); return err },
		"VMConfig": func(ctx context.Context) error {
			_, err := c.VMConfig(ctx, node, vmid)
			return err
		},
		"SetVMConfig": func(ctx context.Context) error {
			return c.SetVMConfig(ctx, node, vmid, pve.VMConfig{
				"cores":       "2",
				"memory":      "2048",
				"agent":       "1",
				"onboot":      "1",
				"tags":        "proxy_operator",
				"ide2":        "local:iso/proxy-1-seed.iso,media=cdrom",
				"net0":        "virtio=BC:24:11:2E:C5:4A,bridge=vmbr1",
				"description": "proxy-operator-managed=true\nproxy-operator-uid=5f0c2a4e\n",
				"name":        "proxy-1",
				"delete":      "unused0",
			})
		},
		"Clone": func(ctx context.Context) error {
			_, err := c.Clone(ctx, node, 9000, pve.CloneParams{
				NewID: vmid, Name: "proxy-1", Description: "proxy-operator-managed=true\n",
				Full: true, Target: "pve2", Storage: "local-lvm", Pool: "proxies",
			})
			return err
		},
		"Resize": func(ctx context.Context) error {
			_, err := c.Resize(ctx, node, vmid, "scsi0", "20G")
			return err
		},
		"Start":  func(ctx context.Context) error { _, err := c.Start(ctx, node, vmid); return err },
		"Stop":   func(ctx context.Context) error { _, err := c.Stop(ctx, node, vmid); return err },
		"Reboot": func(ctx context.Context) error { _, err := c.Reboot(ctx, node, vmid); return err },
		"VMStatus": func(ctx context.Context) error {
			_, err := c.VMStatus(ctx, node, vmid)
			return err
		},
		"Destroy": func(ctx context.Context) error { _, err := c.Destroy(ctx, node, vmid); return err },
		"TaskStatus": func(ctx context.Context) error {
			_, err := c.TaskStatus(ctx, node, upid)
			return err
		},
		"AgentNetworkInterfaces": func(ctx context.Context) error {
			_, err := c.AgentNetworkInterfaces(ctx, node, vmid)
			return err
		},
		"AgentFileRead": func(ctx context.Context) error {
			_, err := c.AgentFileRead(ctx, node, vmid, "/run/cloud-init/result.json")
			return err
		},
		"UploadISO": func(ctx context.Context) error {
			_, err := c.UploadISO(ctx, node, "local", "proxy-1-seed.iso", strings.NewReader(iso), int64(len(iso)))
			return err
		},
		"DeleteVolume": func(ctx context.Context) error {
			_, err := c.DeleteVolume(ctx, node, "local", "local:iso/proxy-1-seed.iso")
			return err
		},
		"StorageContent": func(ctx context.Context) error {
			_, err := c.StorageContent(ctx, node, "local", "iso")
			return err
		},
		"TaskLog": func(ctx context.Context) error {
			_, err := c.TaskLog(ctx, node, upid)
			return err
		},
		"Permissions": func(ctx context.Context) error {
			_, err := c.Permissions(ctx, "/vms/9000")
			return err
		},
		"NodeTasks": func(ctx context.Context) error {
			_, err := c.NodeTasks(ctx, node, pve.TaskListParams{Source: "all", TypeFilter: "qmclone", VMID: vmid, Limit: 10})
			return err
		},
		"HAManagerStatus": func(ctx context.Context) error { _, err := c.HAManagerStatus(ctx); return err },
		"SDNVnets":        func(ctx context.Context) error { _, err := c.SDNVnets(ctx); return err },
		"AddHAResource": func(ctx context.Context) error {
			return c.AddHAResource(ctx, pve.HAResourceParams{SID: "vm:123456", State: "started", Comment: "pveflow proxy"})
		},
		"DeleteHAResource": func(ctx context.Context) error { return c.DeleteHAResource(ctx, "vm:123456") },
		"Migrate": func(ctx context.Context) error {
			_, err := c.Migrate(ctx, node, vmid, pve.MigrateParams{Target: "pve2", Online: true, WithLocalDisks: true})
			return err
		},
	}
	api := reflect.TypeFor[pve.API]()
	require.Len(t, calls, api.NumMethod())
	for i := range api.NumMethod() {
		require.Contains(t, calls, api.Method(i).Name, "every method of pve.API must be driven")
	}

	endpoints := make(map[string]bool)
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, call(t.Context()))
			req := <-recorded

			assert.Nil(t, pveschema.Validate(req.method, req.path, req.params), "%s %s %v", req.method, req.path, req.params)
			ep, ok := pveschema.Lookup(req.method, req.path)
			require.True(t, ok)
			endpoints[ep.Method+" "+ep.Path] = true
			lines := logLines(t, &logs)
			require.Len(t, lines, 1)
			assert.Equal(t, ep.Path, lines[0]["path"], "the debug line names the schema's path template")
		})
	}
	assert.Len(t, endpoints, api.NumMethod(), "each call reaches an endpoint of its own")
}
