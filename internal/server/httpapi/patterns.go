package httpapi

// Patterns returns every route the API serves as "METHOD /path", in the
// routing table's order. The attack catalogue's walk of the OpenAPI document
// checks it covers each of them (SECURITY.md AP-01).
func Patterns() []string {
	s := newServer(nil, Options{})
	var out []string
	for _, rt := range s.routes() {
		out = append(out, rt.method+" "+rt.path)
	}
	return out
}
