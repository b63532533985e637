// Command openloop is the ingest benchmark's open-loop load generator.
//
// Arrivals are scheduled by the clock at a fixed rate, whatever the server does:
// delivery i is due at start + i/rate. Latency counts from that due time to the answer,
// so a server that stalls is charged for every request queued behind the stall (no
// coordinated omission). send_lag is how late the generator itself sent each request:
// near zero means the generator kept up and the latency is the server's.
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
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
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

func readPool(path string) ([]delivery, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var pool []delivery
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	for scanner.Scan() {
		var d delivery
		if err := json.Unmarshal(scanner.Bytes(), &d); err != nil {
			return nil, fmt.Errorf("line %d of %s: %w", len(pool)+1, path, err)
		}
		pool = append(pool, d)
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if len(pool) == 0 {
		return nil, errors.New(path + " holds no deliveries")
	}
	return pool, nil
}

func newClient(connections int) *http.Client {
	transport := &http.Transport{
		MaxIdleConns:        connections,
		MaxIdleConnsPerHost: connections,
		MaxConnsPerHost:     connections,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	return &http.Client{Transport: transport, Timeout: 30 * time.Second}
}

// warm opens every connection before the clock starts, with a GET each, so the first
// scheduled requests do not pay for the TCP handshakes.
func warm(client *http.Client, url string, connections int) error {
	var wg sync.WaitGroup
	errs := make(chan error, connections)
	for c := 0; c < connections; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(url)
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func post(client *http.Client, url string, d *delivery) string {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(d.Body)))
	if err != nil {
		return fmt.Sprintf("%T", err)
	}
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			return "Timeout"
		}
		return "ConnectionError"
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return fmt.Sprint(resp.StatusCode)
}

func worker(client *http.Client, url string, pool []delivery, jobs <-chan job, out *tally) {
	for j := range jobs {
		sent := time.Now()
		out.lags = append(out.lags, sent.Sub(j.due).Seconds())
		status := post(client, url, &pool[j.index%len(pool)])
		out.statuses[status]++
		if status == "204" {
			out.latencies = append(out.latencies, time.Since(j.due).Seconds())
		}
	}
}

// dispatch hands out every due job on time: it sleeps until the next one is due, then
// queues all that are due by then. The queue holds them all, so it never blocks.
func dispatch(total int, rate float64, start time.Time, jobs chan<- job) {
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; i < total; {
		now := time.Now()
		for ; i < total; i++ {
			due := start.Add(time.Duration(i) * interval)
			if due.After(now) {
				break
			}
			jobs <- job{i, due}
		}
		if i < total {
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		}
	}
	close(jobs)
}

func run(url, warmURL string, pool []delivery, rate, duration float64, connections int) (*result, error) {
	total := int(rate * duration)
	client := newClient(connections)
	if warmURL != "" {
		if err := warm(client, warmURL, connections); err != nil {
			return nil, fmt.Errorf("warming the connections at %s: %w", warmURL, err)
		}
	}
	jobs := make(chan job, total)
	tallies := make([]tally, connections)
	var wg sync.WaitGroup
	for c := range tallies {
		tallies[c] = tally{statuses: map[string]int{}}
		wg.Add(1)
		go func(t *tally) {
			defer wg.Done()
			worker(client, url, pool, jobs, t)
		}(&tallies[c])
	}
	start := time.Now().Add(50 * time.Millisecond)
	time.Sleep(time.Until(start))
	fmt.Fprintln(os.Stderr, "openloop: clock started")
	dispatch(total, rate, start, jobs)
	wg.Wait()
	out := &result{
		DurationS:   float64(total) / rate,
		Statuses:    map[string]int{},
		Latencies:   []float64{},
		SendLag:     []float64{},
		PoolWrapped: total > len(pool),
	}
	for _, t := range tallies {
		for status, n := range t.statuses {
			out.Statuses[status] += n
		}
		out.Latencies = append(out.Latencies, t.latencies...)
		out.SendLag = append(out.SendLag, t.lags...)
	}
	return out, nil
}

func main() {
	url := flag.String("url", "", "where to POST the deliveries")
	warmURL := flag.String("warm-url", "", "a URL to GET once per connection before the clock starts")
	input := flag.String("input", "", "the deliveries, as JSON lines")
	output := flag.String("output", "-", "where to write the figures (- for standard output)")
	rate := flag.Float64("rate", 0, "deliveries per second")
	duration := flag.Float64("duration", 0, "seconds of arrivals")
	connections := flag.Int("connections", 64, "keep-alive connections")
	flag.Parse()
	if *url == "" || *input == "" || *rate <= 0 || *duration <= 0 || *connections <= 0 {
		fmt.Fprintln(os.Stderr, "openloop: -url, -input, a positive -rate, -duration and -connections are required")
		os.Exit(2)
	}
	pool, err := readPool(*input)
	if err == nil {
		var out *result
		if out, err = run(*url, *warmURL, pool, *rate, *duration, *connections); err == nil {
			err = write(*output, out)
		}
	}
	if err == nil {
		// Stay until standard input closes, so that whoever measures this process's CPU
		// can read it after the last answer.
		fmt.Fprintln(os.Stderr, "openloop: done")
		io.Copy(io.Discard, os.Stdin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
}

func write(path string, out *result) error {
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if path == "-" {
		_, err = os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
