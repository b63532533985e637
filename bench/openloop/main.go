// Command openloop is the ingest benchmark's open-loop load generator.
//
// Arrivals are scheduled by the clock at a fixed rate, whatever the server does:
// delivery i is due at start + i/rate. Latency counts from that due time to the answer,
// so a server that stalls is charged for every request queued behind the stall (no
// coordinated omission). dispatch_lag is how late the generator itself queued each
// request: near zero means it kept up. send_lag adds the wait for a free connection, which
// grows when the server is slow to answer (every connection busy); the latency counts both.
//
// It reads the deliveries as JSON lines ({"body": "...", "headers": {...}}), sends them
// in turn over a fixed number of keep-alive connections, and writes one JSON object:
// the answers' statuses, the latencies of 204 answers and every send lag, in seconds.
// It prints "openloop: clock started" on standard error when the first delivery is due,
// "openloop: done" once the figures are written, then exits when standard input closes.
// Only Go's standard library is used, so `go build` needs no download.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
)

type delivery struct {
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
}

type result struct {
	DurationS   float64        `json:"duration_s"`
	Statuses    map[string]int `json:"statuses"`
	Latencies   []float64      `json:"latencies"`
	SendLag     []float64      `json:"send_lag"`
	DispatchLag []float64      `json:"dispatch_lag"`
	PoolWrapped bool           `json:"pool_wrapped"`
}

type job struct {
	index int
	due   time.Time
}

// tally is one connection's share of the figures, merged when every worker is done.
type tally struct {
	statuses  map[string]int
	latencies []float64
	lags      []float64
}

// readPool reads the deliveries and writes each as the bytes of its POST to t.
func readPool(path string, t target) ([][]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var pool [][]byte
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	for scanner.Scan() {
		var d delivery
		if err := json.Unmarshal(scanner.Bytes(), &d); err != nil {
			return nil, fmt.Errorf("line %d of %s: %w", len(pool)+1, path, err)
		}
		pool = append(pool, request(t, "POST", d.Headers, d.Body))
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if len(pool) == 0 {
		return nil, errors.New(path + " holds no deliveries")
	}
	return pool, nil
}

// openAll dials every connection before the clock starts, and sends one GET of warm on
// each when it is given, so that the first scheduled requests do not pay for handshakes.
func openAll(t target, warm string, connections int) ([]*conn, error) {
	conns := make([]*conn, connections)
	var get []byte
	if warm != "" {
		w, err := parseTarget(warm)
		if err != nil {
			return nil, err
		}
		get = []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", w.path, w.host))
	}
	for c := range conns {
		conns[c] = &conn{addr: t.addr}
		if err := conns[c].dial(); err != nil {
			return nil, err
		}
		if get != nil {
			if status := conns[c].roundTrip(get, time.Now().Add(10*time.Second)); status != "200" {
				return nil, fmt.Errorf("GET %s answered %s", warm, status)
			}
			if conns[c].c == nil { // the answer closed it: open it again before the clock
				if err := conns[c].dial(); err != nil {
					return nil, err
				}
			}
		}
	}
	return conns, nil
}

// worker sends the jobs it takes on its connection; a job taken after the deadline is
// counted as a Timeout without being sent, so a server that never answers ends the run.
func worker(k *conn, pool [][]byte, jobs <-chan job, deadline time.Time, out *tally) {
	for j := range jobs {
		now := time.Now()
		out.lags = append(out.lags, now.Sub(j.due).Seconds())
		if now.After(deadline) {
			out.statuses["Timeout"]++
			continue
		}
		until := now.Add(requestTimeout)
		if until.After(deadline) {
			until = deadline
		}
		status := k.roundTrip(pool[j.index%len(pool)], until)
		out.statuses[status]++
		if status == "204" {
			out.latencies = append(out.latencies, time.Since(j.due).Seconds())
		}
	}
	k.drop()
}

// requestTimeout bounds one request; the whole run ends at most grace after its last
// arrival is due.
const (
	requestTimeout = 30 * time.Second
	grace          = 30 * time.Second
)

// dispatch hands out every due job on time: it sleeps until the next one is due, then
// queues all that are due by then. The queue holds them all, so it never blocks. It
// returns how late it queued each job: the generator's own lateness, before any wait for
// a free connection.
func dispatch(total int, rate float64, start time.Time, jobs chan<- job) []float64 {
	interval := time.Duration(float64(time.Second) / rate)
	lags := make([]float64, 0, total)
	for i := 0; i < total; {
		now := time.Now()
		for ; i < total; i++ {
			due := start.Add(time.Duration(i) * interval)
			if due.After(now) {
				break
			}
			jobs <- job{i, due}
			lags = append(lags, now.Sub(due).Seconds())
		}
		if i < total {
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		}
	}
	close(jobs)
	return lags
}

func run(conns []*conn, pool [][]byte, rate, duration float64) *result {
	total := int(rate * duration)
	jobs := make(chan job, total)
	tallies := make([]tally, len(conns))
	start := time.Now().Add(50 * time.Millisecond)
	deadline := start.Add(time.Duration(duration*float64(time.Second)) + grace)
	var wg sync.WaitGroup
	for c := range tallies {
		tallies[c] = tally{statuses: map[string]int{}}
		wg.Add(1)
		go func(k *conn, t *tally) {
			defer wg.Done()
			worker(k, pool, jobs, deadline, t)
		}(conns[c], &tallies[c])
	}
	time.Sleep(time.Until(start))
	fmt.Fprintln(os.Stderr, "openloop: clock started")
	dispatched := dispatch(total, rate, start, jobs)
	wg.Wait()
	out := &result{
		DurationS:   float64(total) / rate,
		Statuses:    map[string]int{},
		Latencies:   []float64{},
		SendLag:     []float64{},
		DispatchLag: dispatched,
		PoolWrapped: total > len(pool),
	}
	for _, t := range tallies {
		for status, n := range t.statuses {
			out.Statuses[status] += n
		}
		out.Latencies = append(out.Latencies, t.latencies...)
		out.SendLag = append(out.SendLag, t.lags...)
	}
	return out
}

func main() {
	url := flag.String("url", "", "where to POST the deliveries (http://host:port/path)")
	warmURL := flag.String("warm-url", "", "a URL to GET once per connection before the clock starts")
	input := flag.String("input", "", "the deliveries, as JSON lines")
	output := flag.String("output", "-", "where to write the figures (- for standard output)")
	rate := flag.Float64("rate", 0, "deliveries per second")
	duration := flag.Float64("duration", 0, "seconds of arrivals")
	connections := flag.Int("connections", 64, "keep-alive connections")
	procs := flag.Int("procs", 1, "threads running Go code at once (GOMAXPROCS): on a machine the server shares, one spends the least CPU per request")
	flag.Parse()
	if *url == "" || *input == "" || *rate <= 0 || *duration <= 0 || *connections <= 0 {
		fmt.Fprintln(os.Stderr, "openloop: -url, -input, a positive -rate, -duration and -connections are required")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*procs)
	if err := measure(*url, *warmURL, *input, *output, *rate, *duration, *connections); err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
	// Stay until standard input closes, so that whoever measures this process's CPU can
	// read it after the last answer.
	fmt.Fprintln(os.Stderr, "openloop: done")
	io.Copy(io.Discard, os.Stdin)
}

func measure(url, warm, input, output string, rate, duration float64, connections int) error {
	t, err := parseTarget(url)
	if err != nil {
		return err
	}
	pool, err := readPool(input, t)
	if err != nil {
		return err
	}
	conns, err := openAll(t, warm, connections)
	if err != nil {
		return fmt.Errorf("opening the connections to %s: %w", t.addr, err)
	}
	data, err := json.Marshal(run(conns, pool, rate, duration))
	if err != nil {
		return err
	}
	if output == "-" {
		_, err = os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(output, data, 0o644)
}
