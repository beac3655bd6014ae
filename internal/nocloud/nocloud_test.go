package nocloud

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdomanski/iso9660"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const secret = "SENTINEL-c2VjcmV0LXVzZXItZGF0YQ"

func testSeed() Seed {
	return Seed{
		InstanceID: "proxy-0123abcd",
		Hostname:   "proxy-0123abcd",
		UserData:   "#cloud-config\nchpasswd:\n  users:\n    - {name: debian, password: " + secret + "}\n",
		VendorData: "#cloud-config\npackages:\n  - qemu-guest-agent\n",
	}
}

func writeImage(t *testing.T, s Seed) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := Write(&buf, s)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n, "Write must report the bytes it wrote")
	return buf.Bytes()
}

// rootFiles reads the image back with the library's own reader, keyed by the name it reports.
func rootFiles(t *testing.T, img []byte) map[string]string {
	t.Helper()
	im, err := iso9660.OpenImage(bytes.NewReader(img))
	require.NoError(t, err)
	root, err := im.RootDir()
	require.NoError(t, err)
	children, err := root.GetChildren()
	require.NoError(t, err)

	files := make(map[string]string, len(children))
	for _, c := range children {
		require.False(t, c.IsDir(), "unexpected directory %q", c.Name())
		content, err := io.ReadAll(c.Reader())
		require.NoError(t, err)
		files[c.Name()] = string(content)
	}
	require.Len(t, files, len(children), "duplicate names on the image")
	return files
}

func TestWrite_readBackVolumeLabelAndThreeFiles(t *testing.T) {
	s := testSeed()
	img := writeImage(t, s)

	im, err := iso9660.OpenImage(bytes.NewReader(img))
	require.NoError(t, err)
	label, err := im.Label()
	require.NoError(t, err)
	assert.Equal(t, "cidata", label)

	assert.Equal(t, map[string]string{
		"meta-data":   "instance-id: proxy-0123abcd\nlocal-hostname: proxy-0123abcd\n",
		"user-data":   s.UserData,
		"vendor-data": s.VendorData,
	}, rootFiles(t, img))
}

func TestWrite_emptyUserDataStillWritesFile(t *testing.T) {
	s := testSeed()
	s.UserData = ""

	files := rootFiles(t, writeImage(t, s))

	require.Contains(t, files, "user-data")
	assert.Empty(t, files["user-data"])
}

func TestWrite_quotesInstanceIDThatIsYAMLSyntax(t *testing.T) {
	s := testSeed()
	s.InstanceID = "a: b"

	files := rootFiles(t, writeImage(t, s))

	assert.Equal(t, "instance-id: 'a: b'\nlocal-hostname: proxy-0123abcd\n", files["meta-data"])
}

// The library stamps the primary volume descriptor (sector 16) with time.Now() as its
// creation, modification and effective dates (ECMA-119 8.4.26 to 8.4.29, bytes 813 to 880);
// everything else depends on the seed alone.
func TestWrite_sameSeedSameImageExceptVolumeTimestamps(t *testing.T) {
	const pvd = 16 * 2048
	maskDates := func(img []byte) []byte {
		clear(img[pvd+813 : pvd+881])
		return img
	}

	first := writeImage(t, testSeed())
	second := writeImage(t, testSeed())

	require.Len(t, second, len(first))
	assert.Equal(t, maskDates(first), maskDates(second))
}

func TestWrite_rejectsEmptyInstanceIDAndBadHostname(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Seed)
		wantErr error
	}{
		{"empty instance-id", func(s *Seed) { s.InstanceID = "" }, ErrEmptyInstanceID},
		{"empty hostname", func(s *Seed) { s.Hostname = "" }, ErrEmptyHostname},
		{"dot", func(s *Seed) { s.Hostname = "proxy.example" }, ErrInvalidHostname},
		{"underscore", func(s *Seed) { s.Hostname = "proxy_1" }, ErrInvalidHostname},
		{"leading hyphen", func(s *Seed) { s.Hostname = "-proxy" }, ErrInvalidHostname},
		{"trailing hyphen", func(s *Seed) { s.Hostname = "proxy-" }, ErrInvalidHostname},
		{"64 characters", func(s *Seed) { s.Hostname = strings.Repeat("a", 64) }, ErrInvalidHostname},
		{"non-ASCII", func(s *Seed) { s.Hostname = "prüxy" }, ErrInvalidHostname},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSeed()
			tt.edit(&s)
			var buf bytes.Buffer

			n, err := Write(&buf, s)

			require.ErrorIs(t, err, tt.wantErr)
			assert.Zero(t, n)
			assert.Zero(t, buf.Len(), "nothing may be written for an invalid seed")
		})
	}
}

func TestWrite_acceptsDNSLabels(t *testing.T) {
	for _, h := range []string{"a", "proxy-0123abcd", "Proxy-1", "1proxy", strings.Repeat("a", 63)} {
		t.Run(h, func(t *testing.T) {
			s := testSeed()
			s.Hostname = h
			_, err := Write(io.Discard, s)
			assert.NoError(t, err)
		})
	}
}

// failingWriter accepts limit bytes, then fails.
type failingWriter struct{ limit int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.limit {
		n := w.limit
		w.limit = 0
		return n, errDiskFull
	}
	w.limit -= len(p)
	return len(p), nil
}

func TestWrite_writerErrorIsWrappedWithBytesWritten(t *testing.T) {
	tests := []struct {
		name  string
		limit int
	}{
		{"in the system area", 100},
		{"in the volume descriptors", 16*2048 + 100},
		{"in the file data", 20*2048 + 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := Write(&failingWriter{limit: tt.limit}, testSeed())

			require.ErrorIs(t, err, errDiskFull)
			assert.Equal(t, int64(tt.limit), n)
		})
	}
}

func TestWrite_errorsNeverContainUserData(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Seed)
		w      io.Writer
		tmpdir string // TMPDIR for the writer's staging dir; "" keeps the test's own
	}{
		{name: "empty instance-id", edit: func(s *Seed) { s.InstanceID = "" }, w: io.Discard},
		{name: "empty hostname", edit: func(s *Seed) { s.Hostname = "" }, w: io.Discard},
		{name: "invalid hostname", edit: func(s *Seed) { s.Hostname = "not_a_label" }, w: io.Discard},
		{name: "staging dir cannot be created", w: io.Discard, tmpdir: "/nonexistent/nocloud-test"},
		{name: "writer fails in the system area", w: &failingWriter{limit: 0}},
		{name: "writer fails in the volume descriptor", w: &failingWriter{limit: 16*2048 + 100}},
		{name: "writer fails in the file data", w: &failingWriter{limit: 20*2048 + 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := tt.tmpdir
			if tmp == "" {
				tmp = t.TempDir()
			}
			t.Setenv("TMPDIR", tmp)
			s := testSeed()
			if tt.edit != nil {
				tt.edit(&s)
			}

			_, err := Write(tt.w, s)

			require.Error(t, err)
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

func TestWrite_removesStagingDir(t *testing.T) {
	tests := []struct {
		name    string
		w       io.Writer
		wantErr bool
	}{
		{"success", io.Discard, false},
		{"writer failure", &failingWriter{limit: 20 * 2048}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)

			_, err := Write(tt.w, testSeed())

			require.Equal(t, tt.wantErr, err != nil, "Write error: %v", err)
			left, err := os.ReadDir(tmp)
			require.NoError(t, err)
			assert.Empty(t, left)
		})
	}
}

func TestWrite_isoinfoAcceptsImage(t *testing.T) {
	isoinfo, err := exec.LookPath("isoinfo")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("isoinfo not on PATH; CI must install Debian's genisoimage")
		}
		t.Skip("isoinfo not on PATH; install it with: apt-get install -y genisoimage")
	}
	path := filepath.Join(t.TempDir(), "seed.iso")
	require.NoError(t, os.WriteFile(path, writeImage(t, testSeed()), 0o600))

	descr, err := exec.Command(isoinfo, "-d", "-i", path).CombinedOutput()
	require.NoError(t, err, "isoinfo -d: %s", descr)
	assert.Contains(t, string(descr), "Volume id: cidata\n")

	// Without Rock Ridge or Joliet isoinfo shows the raw ISO 9660 names. Linux's isofs (and so
	// cloud-init's mount) drops the ";1" version and shows these as user-data and so on.
	list, err := exec.Command(isoinfo, "-f", "-i", path).CombinedOutput()
	require.NoError(t, err, "isoinfo -f: %s", list)
	assert.Equal(t, []string{"/meta-data;1", "/user-data;1", "/vendor-data;1"},
		strings.Fields(string(list)))
}

func BenchmarkWrite(b *testing.B) {
	s := testSeed()
	s.UserData = "#cloud-config\n" + strings.Repeat("# typical user-data, 4 KiB in all\n", 4096/34)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Write(io.Discard, s); err != nil {
			b.Fatal(err)
		}
	}
}
