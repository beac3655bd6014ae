// Package nocloud builds the NoCloud seed ISO that a cloned VM boots with: a volume labelled
// "cidata" holding user-data, meta-data and vendor-data at its root, and network-config when the
// guest's network is not cloud-init's fallback (DHCP on the first NIC).
//
// User-data may carry secrets, so nothing here logs it or quotes it in an error.
package nocloud

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kdomanski/iso9660"
	"go.yaml.in/yaml/v3"
)

// volumeLabel is the label cloud-init's NoCloud datasource looks for (it also accepts CIDATA).
const volumeLabel = "cidata"

// Errors for a Seed that cloud-init could not use; Write returns them before writing anything.
var (
	ErrEmptyInstanceID = errors.New("nocloud: empty instance-id")
	ErrEmptyHostname   = errors.New("nocloud: empty hostname")
	ErrInvalidHostname = errors.New("nocloud: hostname is not a DNS label")
)

// Seed is what goes on the seed ISO. UserData may hold secrets: nothing in this package logs it
// or puts it into an error message.
type Seed struct {
	InstanceID string // meta-data instance-id
	Hostname   string // meta-data local-hostname
	UserData   string
	VendorData string // the merged vendor-data document, see VendorData
	// Network are the guest's NICs for a network-config file; without any, none is written and
	// cloud-init takes DHCP on the first NIC, its fallback.
	Network []Ethernet
}

// Write builds the ISO 9660 image, volume label "cidata", with user-data, meta-data and
// vendor-data at the root, and network-config when s has a Network, into w. Returns the bytes
// written.
//
// All three files are always written: cloud-init refuses a seed without user-data and
// meta-data, even when user-data is empty.
func Write(w io.Writer, s Seed) (int64, error) {
	meta, err := s.metaData()
	if err != nil {
		return 0, err
	}

	var network string
	if len(s.Network) > 0 {
		if network, err = NetworkConfig(s.Network); err != nil {
			return 0, err
		}
	}

	iw, err := iso9660.NewWriter()
	if err != nil {
		return 0, fmt.Errorf("nocloud: creating staging dir: %w", err)
	}
	// The writer stages every file under TMPDIR. Failing to remove that directory is not a
	// reason to fail a seed that was written whole, so the error is dropped.
	defer iw.Cleanup()

	// The writer lower-cases names and keeps '-', and Linux's isofs shows "user-data;1" as
	// "user-data", which is the name cloud-init opens.
	files := []struct{ name, content string }{
		{"meta-data", meta},
		{"user-data", s.UserData},
		{"vendor-data", s.VendorData},
	}
	if network != "" {
		files = append(files, struct{ name, content string }{"network-config", network})
	}
	for _, f := range files {
		if err := iw.AddFile(strings.NewReader(f.content), f.name); err != nil {
			return 0, fmt.Errorf("nocloud: staging %s: %w", f.name, err)
		}
	}

	cw := &countingWriter{w: w}
	if err := iw.WriteTo(cw, volumeLabel); err != nil {
		// WriteTo flattens w's error into text once it is past the volume descriptors; the
		// original keeps errors.Is working for callers, such as one streaming into a pipe.
		if cw.err != nil {
			err = cw.err
		}
		return cw.n, fmt.Errorf("nocloud: writing seed image: %w", err)
	}
	return cw.n, nil
}

func (s Seed) metaData() (string, error) {
	switch {
	case s.InstanceID == "":
		return "", ErrEmptyInstanceID
	case s.Hostname == "":
		return "", ErrEmptyHostname
	case !IsDNSLabel(s.Hostname):
		return "", fmt.Errorf("%w: %q", ErrInvalidHostname, s.Hostname)
	}
	// Marshalled rather than formatted so that an instance-id with YAML syntax in it is quoted.
	b, err := yaml.Marshal(struct {
		InstanceID string `yaml:"instance-id"`
		Hostname   string `yaml:"local-hostname"`
	}{s.InstanceID, s.Hostname})
	if err != nil {
		return "", fmt.Errorf("nocloud: encoding meta-data: %w", err)
	}
	return string(b), nil
}

// IsDNSLabel reports whether s is an RFC 1123 label: 1 to 63 ASCII letters (either case), digits
// and hyphens, with no hyphen at either end. cloud-init sets the guest's hostname from
// local-hostname, which must be one.
func IsDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// countingWriter counts what reaches w, because iso9660's WriteTo does not report it, and
// keeps w's first error.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.err == nil {
		c.err = err
	}
	return n, err
}
