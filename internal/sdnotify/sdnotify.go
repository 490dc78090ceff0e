// Package sdnotify tells a service manager how this process is doing: the
// sd_notify(3) protocol, one datagram on the unix socket that the
// NOTIFY_SOCKET environment variable names (systemd's Type=notify).
package sdnotify

import (
	"net"
	"os"
)

// Ready is the state that says start-up is complete.
const Ready = "READY=1"

// Stopping is the state that says the process is shutting down.
const Stopping = "STOPPING=1"

// Notify sends state to the socket NOTIFY_SOCKET names (a leading @ names
// an abstract socket). It reports false, and does nothing, when the
// variable is unset.
func Notify(state string) (bool, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return false, nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return true, err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return true, err
}
