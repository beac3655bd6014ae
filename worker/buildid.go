package main

import "runtime/debug"

// buildID names this binary in its worker deployment: the VCS revision it was built from (with
// "-dirty" for uncommitted changes), or else its module version, or else "" when the build
// info has neither, as with `go run` or -buildvcs=false outside a release.
func buildID() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return buildIDOf(info)
}

func buildIDOf(info *debug.BuildInfo) string {
	settings := make(map[string]string)
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		id := rev[:min(len(rev), 12)]
		if settings["vcs.modified"] == "true" {
			id += "-dirty"
		}
		return id
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return ""
}
