// Package buildinfo says which build a binary of pveflow is: its module version and the commit
// it was built from, for `pveflow version`, `worker --version` and the worker's build ID in its
// deployment. go build stamps the commit itself (debug.BuildInfo's VCS settings) unless
// -buildvcs=false, as a go env file or a build machine may set; make stamps it in any case,
// through -ldflags -X into the variables below. A plain go build with neither is "(devel)".
package buildinfo

import (
	"fmt"
	"io"
	"runtime/debug"
	"text/tabwriter"
)

// What make stamps (-ldflags -X); empty in a plain go build. modified is "true" or "false".
// release is git describe's name of the commit by the release tags (v1.0.0 less its v: 1.0.0 on
// the tagged commit, 1.0.0-3-g<commit> three commits after it, -dirty with changes), empty
// before the first tag.
var (
	revision     string
	revisionTime string
	modified     string
	release      string
)

// Info is a binary's build.
type Info struct {
	Module string `json:"module"`
	// Version is the module's version; for a build from a checkout, which has none, the
	// release make named it by (1.0.0 on the release's commit), else its ID when the commit is
	// known, "(devel)" when not.
	Version      string `json:"version"`
	Revision     string `json:"revision,omitempty"`
	RevisionTime string `json:"revisionTime,omitempty"`
	// Modified says the checkout had changes not committed.
	Modified    bool   `json:"modified,omitempty"`
	GoVersion   string `json:"goVersion"`
	TemporalSDK string `json:"temporalSDK"`
}

// Read is this binary's Info; false when it carries no build information.
func Read() (Info, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{}, false
	}
	return of(info, stamp{revision, revisionTime, modified, release}), true
}

// stamp is what make stamped into a build.
type stamp struct{ revision, revisionTime, modified, release string }

// of is the Info of a build: go build's own VCS settings, or what make stamped, which wins.
func of(info *debug.BuildInfo, stamped stamp) Info {
	v := Info{Module: info.Main.Path, Version: info.Main.Version, GoVersion: info.GoVersion}
	for _, dep := range info.Deps {
		if dep.Path == "go.temporal.io/sdk" {
			v.TemporalSDK = dep.Version
		}
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.RevisionTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if stamped.revision != "" {
		v.Revision, v.RevisionTime, v.Modified = stamped.revision, stamped.revisionTime, stamped.modified == "true"
	}
	switch {
	case v.Version == "(devel)" && stamped.release != "":
		v.Version = stamped.release
	case v.Version == "(devel)" && v.Revision != "":
		v.Version = v.ID()
	}
	return v
}

// ID names the build in one word, as a worker deployment's build ID: the commit's first 12
// digits (with "-dirty" for changes not committed), or else the module's version, or else ""
// when the build has neither.
func (v Info) ID() string {
	if v.Revision != "" {
		id := v.Revision[:min(len(v.Revision), 12)]
		if v.Modified {
			id += "-dirty"
		}
		return id
	}
	if v.Version != "" && v.Version != "(devel)" {
		return v.Version
	}
	return ""
}

// Write writes v for a person, program naming the binary: its module and version, the commit
// when known, Go's version and the Temporal SDK's.
func (v Info) Write(w io.Writer, program string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\t%s %s\n", program, v.Module, v.Version)
	if v.Revision != "" {
		changes := ""
		if v.Modified {
			changes = " (modified)"
		}
		fmt.Fprintf(tw, "revision\t%s %s%s\n", v.Revision, v.RevisionTime, changes)
	}
	fmt.Fprintf(tw, "go\t%s\n", v.GoVersion)
	fmt.Fprintf(tw, "temporal sdk\t%s\n", v.TemporalSDK)
	return tw.Flush()
}
