package pvesim

import (
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

const repoID = "5d9b2f1c8a3e4076"

// Version answers as pve-manager 9.2.11.
func (c *Cluster) Version(ctx context.Context) (pve.Version, error) {
	return call(c, ctx, Call{Method: "Version"}, func(time.Time) (pve.Version, error) {
		return pve.Version{Version: "9.2.11", Release: "9.2", RepoID: repoID}, nil
	})
}

// NodeStatus describes a node: a 12-thread machine with 64 GB, whose used memory grows with
// the VMs running on it.
func (c *Cluster) NodeStatus(ctx context.Context, node string) (pve.NodeStatus, error) {
	return call(c, ctx, Call{Method: "NodeStatus", Node: node}, func(now time.Time) (pve.NodeStatus, error) {
		if err := c.allow("/nodes/"+node, "Sys.Audit"); err != nil {
			return pve.NodeStatus{}, err
		}
		if _, err := c.nodeNamed(node); err != nil {
			return pve.NodeStatus{}, err
		}
		const total = 67108864000
		used := int64(4 << 30)
		for _, g := range c.vms {
			if g.node == node && g.running {
				used += g.memoryMiB() * mib
			}
		}
		return pve.NodeStatus{
			Uptime:     int64(now.Sub(c.epoch).Seconds()),
			CPU:        0.0213,
			KVersion:   "Linux 6.17.2-1-pve #1 SMP PREEMPT_DYNAMIC PMX 6.17.2-1 (2026-10-14T09:12Z)",
			PVEVersion: "pve-manager/9.2.11/" + repoID,
			Memory:     pve.MemoryStatus{Total: total, Used: used, Free: max(total-used, 0)},
			CPUInfo:    pve.NodeCPUInfo{Model: "Intel(R) Core(TM) i5-12500", CPUs: 12, Cores: 6, Sockets: 1},
			RootFS:     pve.StorageAmount{Total: 100861726720, Used: 9663676416, Avail: 86017880064},
		}, nil
	})
}

// StorageStatus reads a storage's type, content and space as the node sees it.
func (c *Cluster) StorageStatus(ctx context.Context, node, storage string) (pve.StorageStatus, error) {
	return call(c, ctx, Call{Method: "StorageStatus", Node: node}, func(time.Time) (pve.StorageStatus, error) {
		if err := c.allow("/storage/"+storage, "Datastore.Audit", "Datastore.AllocateSpace"); err != nil {
			return pve.StorageStatus{}, err
		}
		nd, err := c.nodeNamed(node)
		if err != nil {
			return pve.StorageStatus{}, err
		}
		st := nd.storages[storage]
		if st == nil {
			return pve.StorageStatus{}, paramErr(map[string]string{"storage": "No such storage."})
		}
		avail := st.avail()
		return pve.StorageStatus{
			Type:    st.Type,
			Content: strings.Join(slices.Sorted(maps.Keys(st.content)), ","),
			Enabled: true,
			Active:  true,
			Shared:  st.Shared,
			Total:   st.Total,
			Used:    st.Total - avail,
			Avail:   avail,
		}, nil
	})
}

// storageOn is the storage a call names on a node, as storage_check_enabled finds it.
func (c *Cluster) storageOn(node, id string) (*storage, error) {
	if st := c.nodes[node].storages[id]; st != nil {
		return st, nil
	}
	for _, nd := range c.nodes {
		if nd.storages[id] != nil {
			return nil, serverErr(fmt.Sprintf("storage '%s' is not available on node '%s'", id, node))
		}
	}
	return nil, serverErr(noStorageText(id))
}

// uploadTypes are the storage types with a directory, the only ones that take uploads.
var uploadTypes = map[string]bool{"dir": true, "nfs": true, "cifs": true, "cephfs": true, "glusterfs": true, "btrfs": true}

var (
	isoNameRE    = regexp.MustCompile(`(?i)^[^/]+\.(?:iso|img)$`)
	unsafeNameRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)
	// volumeIDRE is PVE's parse_volume_id: a storage ID, a colon, a name.
	volumeIDRE = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]:.+$`)
	// dirVolumeNameRE is what the parse_volname of a directory-based storage takes: images
	// under a VMID's directory, ISOs with their extension, and the other content types' own
	// directories, whose names the model does not check further.
	dirVolumeNameRE = regexp.MustCompile(`^(?:\d+/\S+|iso/[^/]+\.(?i:iso|img)|(?:vztmpl|backup|snippets|import)/.+)$`)
)

// maxNameLength is the upload's filename limit in PVE's schema.
const maxNameLength = 255

// normalizeFilename is PVE's normalize_content_filename: the path is dropped and every
// character but letters, digits, '_', '.' and '-' becomes '_'.
func normalizeFilename(name string) string {
	name = strings.TrimRight(name, "\n")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return unsafeNameRE.ReplaceAllString(name, "_")
}

// UploadISO stores an ISO on a storage with an imgcopy task. The body must be exactly size
// bytes; a negative size is an upload without Content-Length, which PVE refuses. As on PVE the
// body is received before the storage and name are checked, and an existing ISO of the same
// name is overwritten when the task ends.
func (c *Cluster) UploadISO(ctx context.Context, node, storage, filename string, r io.Reader, size int64) (pve.UPID, error) {
	if err := c.enter(ctx, Call{Method: "UploadISO", Node: node}); err != nil {
		return "", err
	}
	// pveproxy checks the privilege before it reads the body.
	if err := c.allow("/storage/"+storage, "Datastore.AllocateTemplate"); err != nil {
		return "", c.render(err)
	}
	data, readErr := readBody(r, size)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return locked(c, Call{Method: "UploadISO", Node: node}, func(now time.Time) (pve.UPID, error) {
		if readErr != nil {
			return "", readErr
		}
		if _, err := c.nodeNamed(node); err != nil {
			return "", err
		}
		st, err := c.storageOn(node, storage)
		if err != nil {
			return "", err
		}
		if !uploadTypes[st.Type] {
			return "", serverErr(fmt.Sprintf("can't upload to storage type '%s'", st.Type))
		}
		if len(filename) > maxNameLength {
			return "", paramErr(map[string]string{"filename": fmt.Sprintf("value may only be %d characters long", maxNameLength)})
		}
		name := normalizeFilename(filename)
		if !isoNameRE.MatchString(name) {
			return "", paramErr(map[string]string{"filename": "wrong file extension"})
		}
		if !st.content["iso"] {
			return "", serverErr(fmt.Sprintf("storage '%s' does not support 'iso' content", storage))
		}
		t := c.startTask(now, node, "imgcopy", "", "OK")
		if succeeded(t.exit) {
			c.onEnd(t, func() {
				st.volumes["iso/"+name] = &volume{size: size, data: data, ctime: t.end}
			})
		}
		return t.upid, nil
	})
}

// readBody reads an upload's body, which must be exactly size bytes.
func readBody(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		// A body of unknown length goes out chunked, which pveproxy refuses before anything
		// else (pve-http-server AnyEvent.pm process_header).
		return nil, apiErr(501, "chunked transfer encoding not supported")
	}
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	switch {
	case err != nil:
		return nil, serverErr("upload failed")
	case int64(len(data)) < size:
		return nil, serverErr(fmt.Sprintf("upload failed - got %d of %d bytes", len(data), size))
	case int64(len(data)) > size:
		return nil, serverErr(fmt.Sprintf("upload failed - body longer than %d bytes", size))
	}
	return data, nil
}

// StorageContent lists a storage's volumes, by volume ID, as the node sees them; content, when
// set, keeps those of one content type ("iso", "images"). PVE lists nothing of a content type
// the storage does not hold, and so does the model. As PVE, it leaves out each volume the token
// may not access (volumeAccess): a disk image of a VMID the token holds nothing on is not
// listed without Datastore.Allocate on the storage.
func (c *Cluster) StorageContent(ctx context.Context, node, storage, content string) ([]pve.StorageVolume, error) {
	return call(c, ctx, Call{Method: "StorageContent", Node: node}, func(time.Time) ([]pve.StorageVolume, error) {
		if _, err := c.nodeNamed(node); err != nil {
			return nil, err
		}
		st, err := c.storageOn(node, storage)
		if err != nil {
			return nil, err
		}
		if err := c.allow("/storage/"+storage, "Datastore.Audit", "Datastore.AllocateSpace"); err != nil {
			return nil, err
		}
		out := []pve.StorageVolume{}
		for _, name := range slices.Sorted(maps.Keys(st.volumes)) {
			v := st.volumes[name]
			sv := pve.StorageVolume{VolID: st.volid(name), Content: "images", Format: "raw", Size: v.size, CTime: v.ctime.Unix(), VMID: volumeOwner(name)}
			if strings.HasPrefix(name, "iso/") {
				sv.Content, sv.Format = "iso", "iso"
			}
			if (content == "" || content == sv.Content) && c.volumeAccess(storage, sv) == nil {
				out = append(out, sv)
			}
		}
		return out, nil
	})
}

// volumeAccess is pve-storage's check_volume_access (src/PVE/Storage.pm) for a listed volume:
// Datastore.Allocate on the storage gives every volume; otherwise an ISO needs
// Datastore.AllocateSpace or Datastore.Audit on it, and a disk image of VMID n both
// Datastore.Audit on the storage and VM.Config.Disk on /vms/n, whether or not VM n exists.
func (c *Cluster) volumeAccess(storage string, v pve.StorageVolume) error {
	if c.allow("/storage/"+storage, "Datastore.Allocate") == nil {
		return nil
	}
	switch {
	case v.Content == "iso":
		return c.allow("/storage/"+storage, "Datastore.AllocateSpace", "Datastore.Audit")
	case v.VMID != 0:
		if err := c.allow("/storage/"+storage, "Datastore.Audit"); err != nil {
			return err
		}
		return c.allow(vmPath(v.VMID), "VM.Config.Disk")
	}
	return serverErr(fmt.Sprintf("missing privileges to access %s\n", v.VolID))
}

// DeleteVolume deletes a volume with an imgdel task. volid is a full volume ID
// ("local:iso/seed.iso") or one relative to storage ("iso/seed.iso"). A volume that does not
// exist is no error: the task ends OK. A volume ID PVE cannot parse is a 400, and on a
// directory-based storage a name its plugin cannot parse (an ISO without its extension) is a
// 500, before the task; the model names disks on any storage as on LVM, so names it holds pass.
// It needs Datastore.Allocate on the storage for any volume but a backup (pve-storage
// src/PVE/API2/Storage/Content.pm delete): a disk image of a VMID that has no VM is no
// exception, and PVE checks nothing on /vms for it.
func (c *Cluster) DeleteVolume(ctx context.Context, node, storage, volid string) (pve.UPID, error) {
	return call(c, ctx, Call{Method: "DeleteVolume", Node: node}, func(now time.Time) (pve.UPID, error) {
		if _, err := c.nodeNamed(node); err != nil {
			return "", err
		}
		sid, name, full := strings.Cut(volid, ":")
		switch {
		case full && !volumeIDRE.MatchString(volid):
			return "", paramErr(map[string]string{"volume": fmt.Sprintf("unable to parse volume ID '%s'\n", volid)})
		case full && storage != "" && sid != storage:
			return "", paramErr(map[string]string{"volume": fmt.Sprintf("storage ID mismatch (%s != %s)\n", sid, storage)})
		case !full && storage == "":
			return "", paramErr(map[string]string{"volume": "no storage specified - incomplete volume ID"})
		case !full:
			sid, name = storage, volid
		}
		st, err := c.storageOn(node, sid)
		if err != nil {
			return "", err
		}
		if uploadTypes[st.Type] && st.volumes[name] == nil && !dirVolumeNameRE.MatchString(name) {
			return "", serverErr(fmt.Sprintf("unable to parse directory volume name '%s'", name))
		}
		if err := c.allow("/storage/"+sid, "Datastore.Allocate"); err != nil {
			return "", err
		}
		id := sid
		if owner := volumeOwner(name); owner != 0 {
			id = strconv.Itoa(owner) + "@" + sid
		}
		t := c.startTask(now, node, "imgdel", id, "OK")
		if succeeded(t.exit) {
			c.onEnd(t, func() { delete(st.volumes, name) })
		}
		return t.upid, nil
	})
}
