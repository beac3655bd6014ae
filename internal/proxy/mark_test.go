package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/pve"
)

func TestFormatDescription_keys(t *testing.T) {
	created := time.Date(2026, 9, 18, 17, 2, 3, 456, time.FixedZone("CEST", 2*60*60))
	got := FormatDescription(Mark{UID: "3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00", CreatedAt: created})
	assert.Equal(t, []string{
		"proxy-operator-managed=true",
		"proxy-operator-uid=3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00",
		"proxy-operator-created-at=2026-09-18T15:02:03Z",
	}, strings.Split(got, "\n"))
}

func TestParseDescription_table(t *testing.T) {
	const uid = "3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00"
	created := time.Date(2026, 9, 18, 15, 2, 3, 0, time.UTC)
	ours := Mark{UID: uid, CreatedAt: created}
	tests := []struct {
		name        string
		description string
		want        Mark
		wantManaged bool
	}{
		{
			name:        "as formatted",
			description: FormatDescription(ours),
			want:        ours, wantManaged: true,
		},
		{
			name:        "with the trailing newline PVE returns",
			description: FormatDescription(ours) + "\n",
			want:        ours, wantManaged: true,
		},
		{
			name:        "CRLF",
			description: strings.ReplaceAll(FormatDescription(ours), "\n", "\r\n") + "\r\n",
			want:        ours, wantManaged: true,
		},
		{
			name: "extra lines and spaces",
			description: "Egress proxy for team blue.\n\n" +
				"  proxy-operator-managed = true  \n" +
				"owner: alice\n" +
				"\tproxy-operator-uid=" + uid + "\n" +
				"proxy-operator-created-at=2026-09-18T15:02:03Z\n" +
				"see https://wiki.example.com/?a=b\n",
			want: ours, wantManaged: true,
		},
		{
			name:        "missing managed",
			description: "proxy-operator-uid=" + uid + "\nproxy-operator-created-at=2026-09-18T15:02:03Z",
			want:        ours, wantManaged: false,
		},
		{
			name:        "managed not true",
			description: "proxy-operator-managed=false\nproxy-operator-uid=" + uid,
			want:        Mark{UID: uid}, wantManaged: false,
		},
		{
			name:        "other UID",
			description: FormatDescription(Mark{UID: "other", CreatedAt: created}),
			want:        Mark{UID: "other", CreatedAt: created}, wantManaged: true,
		},
		{
			name:        "garbage date",
			description: "proxy-operator-managed=true\nproxy-operator-uid=" + uid + "\nproxy-operator-created-at=yesterday",
			want:        Mark{UID: uid}, wantManaged: true,
		},
		{
			name:        "clone in progress",
			description: " qmclone temporary file\n",
			wantManaged: false,
		},
		{
			name:        "empty",
			description: "",
			wantManaged: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, managed := ParseDescription(tt.description)
			assert.Equal(t, tt.wantManaged, managed)
			assert.Equal(t, tt.want.UID, got.UID)
			assert.True(t, tt.want.CreatedAt.Equal(got.CreatedAt), "CreatedAt %v, want %v", got.CreatedAt, tt.want.CreatedAt)
		})
	}
}

func TestOwnerOf_table(t *testing.T) {
	mark := FormatDescription(Mark{UID: "uid-a", CreatedAt: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)})
	tests := map[string]struct {
		cfg       pve.VMConfig
		wantUID   string
		wantKnown bool
	}{
		"marked":                      {cfg: pve.VMConfig{"description": mark}, wantUID: "uid-a", wantKnown: true},
		"marked, clone still copying": {cfg: pve.VMConfig{"description": mark, "lock": "clone"}, wantUID: "uid-a", wantKnown: true},
		"temporary clone config":      {cfg: pve.VMConfig{"description": " qmclone temporary file\n", "lock": "clone"}, wantKnown: false},
		"unmarked":                    {cfg: pve.VMConfig{"description": "made by hand"}, wantKnown: true},
		"unmarked, backup running":    {cfg: pve.VMConfig{"lock": "backup"}, wantKnown: true},
		"managed=false":               {cfg: pve.VMConfig{"description": "proxy-operator-managed=false\nproxy-operator-uid=uid-a"}, wantKnown: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			uid, known := OwnerOf(tt.cfg)
			assert.Equal(t, tt.wantUID, uid)
			assert.Equal(t, tt.wantKnown, known)
		})
	}
}

func TestMergeTags_table(t *testing.T) {
	tests := []struct {
		existing string
		extra    []string
		want     string
	}{
		{existing: "", extra: []string{Tag}, want: "proxy_operator"},
		{existing: "debian;template", extra: []string{Tag}, want: "debian;proxy_operator;template"},
		{existing: "Debian, egress", extra: []string{"team-a", Tag}, want: "debian;egress;proxy_operator;team-a"},
		{existing: "proxy_operator;x", extra: []string{Tag}, want: "proxy_operator;x"},
	}
	for _, tt := range tests {
		t.Run(tt.existing, func(t *testing.T) {
			assert.Equal(t, tt.want, MergeTags(tt.existing, tt.extra...))
		})
	}
}

func TestWithMark_table(t *testing.T) {
	const uid = "3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00"
	created := time.Date(2026, 9, 18, 15, 2, 3, 0, time.UTC)
	cloned := FormatDescription(Mark{UID: uid, CreatedAt: created})
	want := Mark{UID: uid, CreatedAt: created, InstanceID: uid + ".g2", Image: "debian13", Spec: &Spec{MachineType: "small",
		Addresses: Addresses{IPv4: "192.0.2.10/24", Gateway4: "192.0.2.1"}, AddressPool: "edge", NICs: []config.NIC{{}, {Bridge: "vmbr1", VLAN: 20}}, UserDataSHA256: "ab12"}}
	tests := []struct {
		name        string
		description string
		wantNotes   string
	}{
		{"as the clone wrote it", cloned, ""},
		{"replaces what it had", FormatDescription(Mark{UID: uid, CreatedAt: created, InstanceID: uid, Image: "debian12"}), ""},
		{"keeps a person's notes, drops PVE's trailing newline", "Egress for team blue.\r\n" + cloned + "\n", "Egress for team blue.\n"},
		{"replaces a spec a person broke", cloned + "\nproxy-operator-spec={broken", ""},
		{"drops an operation's record", FormatDescription(Mark{UID: uid, CreatedAt: created, Op: &Op{Run: "r1", Changed: []string{"cores 2 -> 4"}, RebootOwed: true}}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WithMark(tt.description, want)
			assert.Equal(t, tt.wantNotes+FormatDescription(want), got)
			mark, managed := ParseDescription(got)
			assert.True(t, managed)
			assert.Equal(t, want, mark)
		})
	}
}

func TestParseDescription_op(t *testing.T) {
	const uid = "3f0c9a52-5b1e-4c1a-9d7e-2b8f6e4a1c00"
	cloned := FormatDescription(Mark{UID: uid})
	tests := []struct {
		name        string
		description string
		want        *Op
	}{
		{"none", cloned, nil},
		{"as formatted", FormatDescription(Mark{UID: uid, Op: &Op{Run: "r1", Changed: []string{"cores 2 -> 4", "user-data (instance-id x.g2)"}, Reseeded: true, RebootOwed: true}}),
			&Op{Run: "r1", Changed: []string{"cores 2 -> 4", "user-data (instance-id x.g2)"}, Reseeded: true, RebootOwed: true}},
		{"a create's", FormatDescription(Mark{UID: uid, Op: &Op{Run: "r1", Provisioned: true}}), &Op{Run: "r1", Provisioned: true}},
		{"broken by a person: owes a reboot, by no run", cloned + "\nproxy-operator-op={\"run\":\"r1\",broken", &Op{RebootOwed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mark, managed := ParseDescription(tt.description)
			assert.True(t, managed)
			assert.Equal(t, tt.want, mark.Op)
		})
	}
}

func TestOp_byAndOwesReboot(t *testing.T) {
	var none *Op
	assert.False(t, none.By("r1"), "no record is no run's")
	assert.False(t, none.OwesReboot())
	op := &Op{Run: "r1", RebootOwed: true}
	assert.True(t, op.By("r1"))
	assert.False(t, op.By("r2"))
	assert.True(t, op.OwesReboot())
}
