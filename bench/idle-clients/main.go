// Idle WebSocket clients for bench/capacity.py (--client go): the role of its Python
// "--role idle" processes, for connection counts Python cannot hold on a small machine (its
// asyncio clients miss Centrifugo's pings past ~40,000 on 2 cores; a goroutine per
// connection here costs a few kilobytes and no Python).
//
// Each connection is one browser tab as far as Centrifugo can tell: it connects with the
// user's token (the channels it holds are in it), answers the server's pings, keeps the
// position of every channel, recovers from it when it reconnects, and loads the user's
// snapshot (GET /api/me/tasks) when recovery fails — what the UI does.
//
// The parent (capacity.py) writes the connections to a file, one per line:
//
//	user<TAB>connection token<TAB>user token
//
// and talks to this process over stdin/stdout in JSON lines, as with the Python clients:
// {"ready": n} once every connection is current, then for each command on stdin
// "stats" -> {"held", "pushes", "bytes", "rss"}, "reconnect F" -> {"reconnected",
// "seconds", "recovered", "not_recovered", "snapshots", "snapshot_failures"}, "dump PATH"
// -> {"dumped": true} (the arrivals [taskId, taskVersion, unix time] since the last dump).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

const (
	recoveryUnknown = iota
	recoveryFailed
	recoveryDone
)

type position struct {
	offset uint64
	epoch  string
}

type publication struct {
	Offset uint64          `json:"offset"`
	Data   json.RawMessage `json:"data"`
}

type subscribed struct {
	Recovered    bool          `json:"recovered"`
	Offset       uint64        `json:"offset"`
	Epoch        string        `json:"epoch"`
	Publications []publication `json:"publications"`
}

type reply struct {
	Connect *struct {
		Subs map[string]subscribed `json:"subs"`
	} `json:"connect"`
	Push *struct {
		Channel string       `json:"channel"`
		Pub     *publication `json:"pub"`
	} `json:"push"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type payload struct {
	TaskID      string `json:"taskId"`
	TaskVersion any    `json:"taskVersion"`
}

type arrival struct {
	taskID, version string
	at              float64
}

// clients holds every connection of this process and what they received.
type clients struct {
	url, api string
	dialer   websocket.Dialer
	http     *http.Client
	slots    chan struct{} // snapshots in flight at once (a UI's loads, not a flood of sockets)

	pushes, bytes atomic.Int64

	mu        sync.Mutex
	arrivals  []arrival
	snapshots []float64 // seconds each snapshot took
	failures  int
}

type connection struct {
	owner         *clients
	token, bearer string // the connection's token (its channels are in it), the user's for snapshots

	mu        sync.Mutex
	positions map[string]position
	ws        *websocket.Conn
	current   atomic.Bool  // connected and current (recovered, or its snapshot loaded)
	recovery  atomic.Int32 // of the last reconnect
}

func (c *connection) run() {
	for {
		ws, _, err := c.owner.dialer.Dial(c.owner.url, nil)
		if err == nil {
			c.mu.Lock()
			c.ws = ws
			c.mu.Unlock()
			c.session(ws)
			ws.Close()
		}
		c.mu.Lock()
		c.ws = nil
		c.mu.Unlock()
		c.current.Store(false)
		time.Sleep(time.Duration(50+rand.IntN(450)) * time.Millisecond) // a client's reconnect jitter
	}
}

func (c *connection) session(ws *websocket.Conn) {
	connect := map[string]any{"token": c.token}
	c.mu.Lock()
	if len(c.positions) > 0 {
		subs := map[string]any{}
		for channel, p := range c.positions {
			subs[channel] = map[string]any{"recover": true, "offset": p.offset, "epoch": p.epoch}
		}
		connect["subs"] = subs
	}
	c.mu.Unlock()
	if ws.WriteJSON(map[string]any{"id": 1, "connect": connect}) != nil {
		return
	}
	for {
		_, frame, err := ws.ReadMessage()
		if err != nil {
			return
		}
		for _, line := range bytes.Split(frame, []byte("\n")) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			if bytes.Equal(line, []byte("{}")) { // the server's ping
				if ws.WriteMessage(websocket.TextMessage, line) != nil {
					return
				}
				continue
			}
			var message reply
			if json.Unmarshal(line, &message) != nil {
				continue
			}
			switch {
			case message.Error != nil:
				return // refused: connect again
			case message.Connect != nil:
				c.connected(message.Connect.Subs)
			case message.Push != nil && message.Push.Pub != nil:
				c.publication(message.Push.Channel, message.Push.Pub, len(line))
			}
		}
	}
}

// connected: current at once when every channel recovered (or is new), else once the
// snapshot is loaded, which goes on beside the connection (its pings answered meanwhile).
func (c *connection) connected(subs map[string]subscribed) {
	c.mu.Lock()
	was, recovered := len(c.positions) > 0, true
	for channel, sub := range subs {
		recovered = recovered && sub.Recovered
		old, known := c.positions[channel]
		offset := sub.Offset
		if sub.Recovered && known && old.offset > offset {
			offset = old.offset
		}
		epoch := sub.Epoch
		if epoch == "" {
			epoch = old.epoch
		}
		c.positions[channel] = position{offset, epoch}
	}
	c.mu.Unlock()
	for channel, sub := range subs {
		for i := range sub.Publications {
			c.publication(channel, &sub.Publications[i], 0)
		}
	}
	switch {
	case !was:
		c.recovery.Store(recoveryUnknown)
	case recovered:
		c.recovery.Store(recoveryDone)
	default:
		c.recovery.Store(recoveryFailed)
		go func() {
			c.owner.snapshot(c.bearer)
			c.current.Store(true)
		}()
		return
	}
	c.current.Store(true)
}

func (c *connection) publication(channel string, pub *publication, size int) {
	c.mu.Lock()
	if p, ok := c.positions[channel]; ok && pub.Offset > p.offset {
		c.positions[channel] = position{pub.Offset, p.epoch}
	}
	c.mu.Unlock()
	c.owner.pushes.Add(1)
	c.owner.bytes.Add(int64(size))
	var data payload
	if json.Unmarshal(pub.Data, &data) != nil || data.TaskID == "" || data.TaskVersion == nil {
		return
	}
	version := fmt.Sprint(data.TaskVersion)
	if number, ok := data.TaskVersion.(float64); ok {
		version = strconv.FormatFloat(number, 'f', -1, 64)
	}
	at := float64(time.Now().UnixNano()) / 1e9
	c.owner.mu.Lock()
	c.owner.arrivals = append(c.owner.arrivals, arrival{data.TaskID, version, at})
	c.owner.mu.Unlock()
}

// abort drops the connection as a network would: no close handshake.
func (c *connection) abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ws != nil {
		c.ws.NetConn().Close()
	}
}

func (o *clients) snapshot(bearer string) {
	o.slots <- struct{}{}
	defer func() { <-o.slots }()
	started := time.Now()
	request, _ := http.NewRequest(http.MethodGet, o.api+"/api/me/tasks", nil)
	request.Header.Set("Authorization", "Bearer "+bearer)
	response, err := o.http.Do(request)
	ok := err == nil && response.StatusCode == http.StatusOK
	if err == nil {
		_, _ = bufio.NewReader(response.Body).WriteTo(discard{})
		response.Body.Close()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if ok {
		o.snapshots = append(o.snapshots, time.Since(started).Seconds())
	} else {
		o.failures++
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func say(message map[string]any) {
	encoded, _ := json.Marshal(message)
	os.Stdout.Write(append(encoded, '\n'))
}

func rss() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "VmRSS:" {
			kib, _ := strconv.ParseInt(fields[1], 10, 64)
			return kib * 1024
		}
	}
	return 0
}

func waitCurrent(connections []*connection) {
	for {
		all := true
		for _, c := range connections {
			if !c.current.Load() {
				all = false
				break
			}
		}
		if all {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (o *clients) reconnect(connections []*connection, fraction float64) {
	count := max(1, int(float64(len(connections))*fraction))
	chosen := make([]*connection, 0, count)
	for _, i := range rand.Perm(len(connections))[:count] {
		chosen = append(chosen, connections[i])
	}
	o.mu.Lock()
	o.snapshots, o.failures = nil, 0
	o.mu.Unlock()
	started := time.Now()
	for _, c := range chosen {
		c.recovery.Store(recoveryUnknown)
		c.current.Store(false)
		c.abort()
	}
	waitCurrent(chosen)
	took := time.Since(started).Seconds()
	recovered, failed := 0, 0
	for _, c := range chosen {
		switch c.recovery.Load() {
		case recoveryDone:
			recovered++
		case recoveryFailed:
			failed++
		}
	}
	o.mu.Lock()
	snapshots := append([]float64{}, o.snapshots...)
	failures := o.failures
	o.mu.Unlock()
	say(map[string]any{
		"reconnected": len(chosen), "seconds": took, "recovered": recovered, "not_recovered": failed,
		"snapshots": snapshots, "snapshot_failures": failures,
	})
}

func (o *clients) dump(path string) error {
	o.mu.Lock()
	arrivals := o.arrivals
	o.arrivals = nil
	o.mu.Unlock()
	rows := make([][3]any, len(arrivals))
	for i, a := range arrivals {
		rows[i] = [3]any{a.taskID, a.version, a.at}
	}
	encoded, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	return os.WriteFile(path, encoded, 0o644)
}

func main() {
	url := flag.String("url", "", "Centrifugo's WebSocket endpoint")
	api := flag.String("api", "", "the status API's base URL (snapshots)")
	file := flag.String("connections", "", "the connections: user, connection token and user token per line")
	flag.Parse()
	owner := &clients{
		url: *url,
		api: *api,
		// Small buffers: an idle tab reads a ping now and then and a publication of a kilobyte.
		dialer: websocket.Dialer{HandshakeTimeout: 120 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 512},
		http: &http.Client{
			Timeout:   60 * time.Second,
			Transport: &http.Transport{MaxConnsPerHost: 50, MaxIdleConnsPerHost: 50},
		},
		slots: make(chan struct{}, 50),
	}
	lines, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var connections []*connection
	for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		fields := strings.Split(line, "\t")
		if len(fields) != 3 {
			fmt.Fprintf(os.Stderr, "a connection line needs user, token and user token: %q\n", line)
			os.Exit(2)
		}
		connections = append(connections, &connection{
			owner: owner, token: fields[1], bearer: fields[2], positions: map[string]position{},
		})
	}
	for n, c := range connections {
		go c.run()
		if n%200 == 199 {
			time.Sleep(50 * time.Millisecond) // a ramp, not a SYN flood
		}
	}
	waitCurrent(connections)
	say(map[string]any{"ready": len(connections)})
	input := bufio.NewScanner(os.Stdin)
	for input.Scan() {
		command := strings.Fields(input.Text())
		if len(command) == 0 {
			break
		}
		switch command[0] {
		case "stats":
			held := 0
			for _, c := range connections {
				if c.current.Load() {
					held++
				}
			}
			say(map[string]any{"held": held, "pushes": owner.pushes.Load(), "bytes": owner.bytes.Load(), "rss": rss()})
		case "reconnect":
			fraction, _ := strconv.ParseFloat(command[1], 64)
			owner.reconnect(connections, fraction)
		case "dump":
			if err := owner.dump(command[1]); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			say(map[string]any{"dumped": true})
		}
	}
}
