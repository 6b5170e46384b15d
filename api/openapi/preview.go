package openapi

// Preview URLs reach a port of a sandbox through the daemon's reverse proxy,
// by host (<port>-<id>.<domain>) or by path (/v1/sandboxes/{id}/proxy/{port}/).
// Unless the port is public, a request carries the sandbox's preview token in
// one of three ways; the proxy strips each before the request reaches the
// sandbox.
const (
	// PreviewTokenHeader carries the preview token.
	PreviewTokenHeader = "X-Sbx-Preview-Token"
	// PreviewTokenQuery carries it in the URL; the proxy answers a GET with
	// the cookie and a redirect to the same URL without it.
	PreviewTokenQuery = "sbx_token"
	// PreviewCookie carries it from the browser after that redirect
	// (HttpOnly, SameSite=Lax, scoped to the preview's host or path).
	PreviewCookie = "sbx_preview_token"
)

// PreviewURL is how to reach a port of a sandbox from outside: GET
// /v1/sandboxes/{id}/ports/{port}/url, and PUT /v1/sandboxes/{id}/ports/{port}.
type PreviewURL struct {
	Port int `json:"port"`
	// URL is the preview by host: http://<port>-<id>.<domain>[:<port>]/.
	URL string `json:"url"`
	// PathURL is the same preview under the daemon's own address, for setups
	// without wildcard DNS: <daemon>/v1/sandboxes/<id>/proxy/<port>/.
	PathURL string `json:"path_url"`
	// Token is the sandbox's preview token, the same for all its ports. It
	// opens previews only: no API route accepts it.
	Token string `json:"token"`
	// Public: the port is served without a token.
	Public bool `json:"public"`
}

// PortUpdate is the body of PUT /v1/sandboxes/{id}/ports/{port}.
type PortUpdate struct {
	// Public makes the port served without a token (true) or not; required.
	Public *bool `json:"public"`
}
