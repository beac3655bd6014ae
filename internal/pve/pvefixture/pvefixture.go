// Package pvefixture loads the recorded Proxmox VE responses in testdata/pve: each file holds one
// HTTP answer as {"status": N, "reason": "...", "body": "..."}, written from the PVE 9.x sources
// (see docs and ../shared/reference). Tests serve them verbatim, classify them, and compare the
// simulator's answers with them.
package pvefixture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/pveflow/pveflow/internal/pve"
)

// Response is one recorded HTTP answer.
type Response struct {
	Name   string `json:"-"`
	Status int    `json:"status"`
	Reason string `json:"reason"`
	Body   string `json:"body"`
}

// APIError is the error a client makes of this response.
func (r Response) APIError() *pve.APIError {
	return pve.ErrorFromResponse(r.Status, r.Reason, []byte(r.Body))
}

// Dir is the absolute path of testdata/pve.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "pve")
}

// Read loads one fixture by name, with or without its .json suffix.
func Read(name string) (Response, error) {
	name = strings.TrimSuffix(name, ".json")
	data, err := os.ReadFile(filepath.Join(Dir(), name+".json"))
	if err != nil {
		return Response{}, fmt.Errorf("fixture %s: %w", name, err)
	}
	var r Response
	if err := json.Unmarshal(data, &r); err != nil {
		return Response{}, fmt.Errorf("fixture %s: %w", name, err)
	}
	if r.Status < 100 || r.Status > 599 {
		return Response{}, fmt.Errorf("fixture %s: status %d is not an HTTP status", name, r.Status)
	}
	r.Name = name
	return r, nil
}

// Load is Read that fails the test loudly on a missing or broken fixture.
func Load(t testing.TB, name string) Response {
	t.Helper()
	r, err := Read(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Names lists every fixture, sorted, without the .json suffix.
func Names() ([]string, error) {
	entries, err := os.ReadDir(Dir())
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			names = append(names, strings.TrimSuffix(e.Name(), ".json"))
		}
	}
	sort.Strings(names)
	return names, nil
}
