package main

import "github.com/pveflow/pveflow/internal/buildinfo"

// buildID names this binary in its worker deployment (buildinfo.Info.ID): the commit it was
// built from, or else its module version, or else "" when the build info has neither, as with
// `go run` or a plain go build with -buildvcs=false outside a release.
func buildID() string {
	v, _ := buildinfo.Read()
	return v.ID()
}
