// This file measures the network tiers' figures in the lab (netlab.go):
// what a tier adds to a cold create, and what the egress proxy costs a
// stream and a connection, beside the same client connecting directly from
// the daemon's namespace in the same run.

package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// OutputAPI is an API that returns a command's stdout.
type OutputAPI interface {
	API
	Output(ctx context.Context, id string, argv []string) (stdout string, code int, err error)
}

// NetResult is the network figures.
type NetResult struct {
	// CreateNone and CreateAllowlist are create → first exec with the pool
	// off, in tier none and allowlist, on the same daemon, interleaved.
	CreateNone      Summary `json:"create_none"`
	CreateAllowlist Summary `json:"create_allowlist"`
	// StreamMB MiB fetched over HTTP by curl: through the proxy from a
	// sandbox of tier full (ProxyMBps), directly from the daemon's
	// namespace (DirectMBps), and through a bare relay over the same two
	// links as the proxy's (RelayMBps, netlab.go), medians of 3.
	StreamMB   int     `json:"stream_mb"`
	ProxyMBps  float64 `json:"proxy_mb_per_s"`
	DirectMBps float64 `json:"direct_mb_per_s"`
	RelayMBps  float64 `json:"relay_mb_per_s"`
	// ProxyConn and DirectConn are one HTTP request on a new connection,
	// timed by curl, through the proxy and directly.
	ProxyConn  Summary `json:"proxy_connection"`
	DirectConn Summary `json:"direct_connection"`
}

// Network measures the network figures. none, allowlist and full make
// sandboxes of those tiers on one daemon (the pool off) running in lab's
// host namespace, whose resolver knows the lab's upstream.
func Network(ctx context.Context, none, allowlist API, full OutputAPI, lab *NetLab, opts Options) (*NetResult, error) {
	opts.defaults()
	res := &NetResult{StreamMB: max(opts.StreamMB, 256)}
	opts.progress("network: %d warm-up + %d runs of create → exec true, tier none and allowlist, interleaved", opts.Warmup, opts.Runs)
	var dn, da []time.Duration
	for i := range opts.Warmup + opts.Runs {
		for _, c := range []struct {
			api API
			ds  *[]time.Duration
		}{{none, &dn}, {allowlist, &da}} {
			d, err := coldStart(ctx, c.api)
			if err != nil {
				return nil, err
			}
			if i >= opts.Warmup {
				*c.ds = append(*c.ds, d)
			}
		}
	}
	res.CreateNone, res.CreateAllowlist = summarize(dn), summarize(da)

	id, err := full.Create(ctx)
	if err != nil {
		return nil, err
	}
	defer full.Delete(context.WithoutCancel(ctx), id)
	n := int64(res.StreamMB) << 20
	opts.progress("network: %d MiB over HTTP through the egress proxy, directly and through a bare relay, 3 runs each", res.StreamMB)
	curlSpeed := []string{"curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-w", "%{speed_download}"}
	var proxied, direct, relayed []float64
	speed := func(what string, out string, err error) (float64, error) {
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			return 0, fmt.Errorf("curl %s: %q", what, out)
		}
		return v / 1e6, nil
	}
	for range 3 {
		out, code, err := full.Output(ctx, id, append(curlSpeed, lab.UpstreamURL()+"/bytes?n="+strconv.FormatInt(n, 10)))
		if err != nil || code != 0 {
			return nil, fmt.Errorf("curl through the proxy: exit %d: %v %s", code, err, out)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			return nil, fmt.Errorf("curl through the proxy: %q", out)
		}
		proxied = append(proxied, v/1e6)
		out, err = lab.direct(ctx, append(curlSpeed, lab.UpstreamAddrURL()+"/bytes?n="+strconv.FormatInt(n, 10))...)
		if v, err = speed("directly", out, err); err != nil {
			return nil, err
		}
		direct = append(direct, v)
		out, err = lab.in(ctx, lab.clientNS(), append(curlSpeed, lab.RelayURL()+"/bytes?n="+strconv.FormatInt(n, 10))...)
		if v, err = speed("through the relay", out, err); err != nil {
			return nil, err
		}
		relayed = append(relayed, v)
	}
	res.ProxyMBps, res.DirectMBps, res.RelayMBps = median(proxied), median(direct), median(relayed)

	k := max(opts.Runs, 50)
	opts.progress("network: %d requests on new connections through the egress proxy and directly", k)
	conn := func(base string) []string {
		argv := []string{"curl", "-sS", "--noproxy", "*", "-H", "Connection: close"}
		for range k + opts.Warmup {
			argv = append(argv, "-o", "/dev/null", "-w", "%{time_total}\n", base+"/")
		}
		return argv
	}
	out, code, err := full.Output(ctx, id, conn(lab.UpstreamURL()))
	if err != nil || code != 0 {
		return nil, fmt.Errorf("connections through the proxy: exit %d: %v", code, err)
	}
	if res.ProxyConn, err = curlTimes(out, opts.Warmup); err != nil {
		return nil, err
	}
	out, err = lab.direct(ctx, conn(lab.UpstreamAddrURL())...)
	if err != nil {
		return nil, err
	}
	if res.DirectConn, err = curlTimes(out, opts.Warmup); err != nil {
		return nil, err
	}
	return res, nil
}

// direct runs argv in the lab's host namespace: the daemon's, beside it.
func (l *NetLab) direct(ctx context.Context, argv ...string) (string, error) {
	return l.in(ctx, l.HostNS, argv...)
}

// in runs argv in the lab's namespace pinned at ns.
func (l *NetLab) in(ctx context.Context, ns string, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + ns}, argv...)...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s in the lab: %v: %s", argv[0], err, out)
	}
	return string(out), nil
}

// curlTimes summarizes curl's time_total lines (seconds), after skip.
func curlTimes(out string, skip int) (Summary, error) {
	var ds []time.Duration
	for i, l := range strings.Fields(out) {
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			return Summary{}, fmt.Errorf("curl timing %q", l)
		}
		if i >= skip {
			ds = append(ds, time.Duration(v*float64(time.Second)))
		}
	}
	if len(ds) == 0 {
		return Summary{}, fmt.Errorf("no curl timings")
	}
	return summarize(ds), nil
}
