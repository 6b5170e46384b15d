package httpapi

import "strings"

// Patterns returns every route the API serves as "METHOD /path", in the
// routing table's order, each path as the OpenAPI document spells it
// (docPath). The attack catalogue's walk of the OpenAPI document checks it
// covers each of them (SECURITY.md AP-01).
func Patterns() []string {
	s := newServer(nil, Options{})
	var out []string
	for _, rt := range s.routes() {
		out = append(out, rt.method+" "+docPath(rt.path))
	}
	return out
}

// docPath is a route's path as OpenAPI spells it: a wildcard that takes the
// rest of the path, {path...}, is the parameter {path}.
func docPath(p string) string { return strings.ReplaceAll(p, "...}", "}") }
