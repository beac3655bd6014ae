package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"go.temporal.io/sdk/activity"

	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/internal/telemetry"
)

// UploadISORequest is the input of UploadISO. Its user-data may hold secrets: it goes onto the
// ISO and nowhere else (no log line, span, error message or result carries it); in Temporal's
// history it is a payload like the workflow's input, which the worker's codec encrypts.
type UploadISORequest struct {
	StorageRef
	// Name is the VM's name, and so the guest's hostname.
	Name string `json:"name"`
	// Seed names the ISO: it is stored as "<seed>-seed.iso".
	Seed string `json:"seed"`
	// InstanceID is cloud-init's instance-id; pveflow uses the Proxy UID.
	InstanceID string `json:"instanceID"`
	// UserData is cloud-init's user-data.
	UserData string `json:"userData,omitempty"`
	// Network is the guest's NICs for the seed's network-config; empty writes none, and the
	// guest takes DHCP on its first NIC.
	Network []nocloud.Ethernet `json:"network,omitempty"`
}

// UploadISOResult describes the uploaded seed ISO without its content.
type UploadISOResult struct {
	UPID   pve.UPID `json:"upid"`
	VolID  string   `json:"volid"`
	Size   int64    `json:"size"`
	SHA256 string   `json:"sha256"`
}

// UploadISO builds the NoCloud seed ISO (user-data, meta-data, vendor-data from the config, and
// the request's network-config) in memory and uploads it as "<seed>-seed.iso". It returns the upload task; the ISO's volume
// ID, size and SHA-256 say what was uploaded without repeating it.
func (a *Activities) UploadISO(ctx context.Context, req UploadISORequest) (UploadISOResult, error) {
	req.annotate(ctx)
	seed := req.Seed
	step := fmt.Sprintf("upload seed ISO %s to storage %s on node %s", proxy.SeedISOName(seed), req.Storage, req.Node)
	vendorData, err := nocloud.VendorData(a.Proxmox.VendorData, a.Proxmox.InstallGuestAgent)
	if err != nil {
		return UploadISOResult{}, failure(step, pve.Classified(pve.Permanent, fmt.Errorf("vendor-data: %w", err)))
	}
	var iso bytes.Buffer
	size, err := nocloud.Write(&iso, nocloud.Seed{
		InstanceID: req.InstanceID,
		Hostname:   req.Name,
		UserData:   req.UserData,
		VendorData: vendorData,
		Network:    req.Network,
	})
	if err != nil {
		return UploadISOResult{}, failure(step, pve.Classified(pve.Permanent, err))
	}
	sum := sha256.Sum256(iso.Bytes())
	body := &heartbeatReader{ctx: ctx, r: &iso}
	upid, err := a.API.UploadISO(ctx, req.Node, req.Storage, proxy.SeedISOName(seed), body, size)
	if err != nil {
		return UploadISOResult{}, failure(step, err)
	}
	telemetry.PVETarget{UPID: upid}.Annotate(ctx)
	return UploadISOResult{
		UPID:   upid,
		VolID:  proxy.SeedVolID(req.Storage, seed),
		Size:   size,
		SHA256: hex.EncodeToString(sum[:]),
	}, nil
}

// heartbeatReader records a heartbeat with the bytes sent so far as the upload reads its body,
// so a slow upload shows progress in the UI and a cancelled workflow reaches the activity.
// The SDK throttles the heartbeats themselves.
type heartbeatReader struct {
	ctx  context.Context
	r    io.Reader
	sent int64
}

func (h *heartbeatReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.sent += int64(n)
	activity.RecordHeartbeat(h.ctx, h.sent)
	return n, err
}
