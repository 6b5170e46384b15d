// Package fakenet builds a fake internet for sbx's network tests: two network
// namespaces made by the test, "host", where the daemon under test runs, and
// "inet", whose servers (DNS, HTTP, HTTPS, a cloud metadata service, raw TCP and
// UDP listeners, and a catch-all for every other address) log what reaches them.
// Host's only uplink is a veth to inet and every route leads there, so even a
// bug cannot send a packet to a real address, and a test checks what got through
// at the far end, in the servers' log, rather than by the client's silence.
//
// Nothing here touches the namespace the test runs in: namespaces are created
// on threads that are thrown away afterwards, and every link, address, route,
// rule and nftables table lives inside them. It knows nothing of sbx.
package fakenet
