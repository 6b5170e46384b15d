// This file implements the origin check of the routes a browser page could
// reach with what it holds (SECURITY.md AP-10, AP-13): a terminal's WebSocket
// and /mcp. A request with no Origin comes from outside a browser and is not
// concerned; one whose Origin is the daemon's own host, or matches an
// allowed origin, passes; any other is refused before anything starts.

package httpapi

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	"sbx.dev/sbx/internal/sandbox"
)

// checkOrigin refuses a request from a page of another origin than the
// daemon's, unless allowed lists it (host patterns, path.Match).
func checkOrigin(origin, host string, allowed []string) error {
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w: Origin %q is not an origin", sandbox.ErrDenied, truncate(origin, 100))
	}
	if strings.EqualFold(u.Host, host) {
		return nil
	}
	for _, p := range allowed {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return nil
		}
	}
	return fmt.Errorf("%w: a page of %s may not use this route (only the daemon's own origin, and allowed_origins, may)", sandbox.ErrDenied, truncate(origin, 100))
}
