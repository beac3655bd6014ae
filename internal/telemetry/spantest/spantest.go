// Package spantest helps tests read recorded spans.
package spantest

import sdktrace "go.opentelemetry.io/otel/sdk/trace"

// Texts is everything a span records as text: its name, its status, and the keys and values of
// its attributes and of its events' attributes. A test that no secret reaches a span looks in
// these.
func Texts(s sdktrace.ReadOnlySpan) []string {
	texts := []string{s.Name(), s.Status().Description}
	for _, a := range s.Attributes() {
		texts = append(texts, string(a.Key), a.Value.String())
	}
	for _, e := range s.Events() {
		texts = append(texts, e.Name)
		for _, a := range e.Attributes {
			texts = append(texts, string(a.Key), a.Value.String())
		}
	}
	return texts
}
