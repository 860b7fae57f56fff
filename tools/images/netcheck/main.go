// Command netcheck checks a cluster's network from inside its pods:
//
//	netcheck serve ADDR       answers every HTTP request with "netcheck <hostname>"
//	netcheck get URL          resolves URL's host and GETs it (retrying up to 60 s), prints the answer and how long the answered GET took
//	netcheck unresolvable NAME succeeds only if NAME does not resolve (the cluster's DNS answers nothing outside it)
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: netcheck serve ADDR | get URL | unresolvable NAME")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		host, _ := os.Hostname()
		err = http.ListenAndServe(os.Args[2], http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "netcheck %s\n", host)
		}))
	case "get":
		err = get(os.Args[2])
	case "unresolvable":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		addrs, lerr := net.DefaultResolver.LookupHost(ctx, os.Args[2])
		if lerr == nil {
			err = fmt.Errorf("%s resolved to %v", os.Args[2], addrs)
		} else {
			fmt.Printf("%s does not resolve: %v\n", os.Args[2], lerr)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netcheck:", err)
		os.Exit(1)
	}
}

func get(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 30 * time.Second} // a Knative Service at zero answers after a cold start
	deadline := time.Now().Add(60 * time.Second)
	for {
		addrs, err := net.LookupHost(u.Hostname())
		if err == nil {
			var resp *http.Response
			t0 := time.Now()
			if resp, err = c.Get(raw); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					fmt.Printf("%s (%s -> %v) in %dms: %s", raw, u.Hostname(), addrs, time.Since(t0).Milliseconds(), body)
					return nil
				}
				err = fmt.Errorf("%s answered %s", raw, resp.Status)
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		fmt.Fprintln(os.Stderr, "netcheck: retrying:", err)
		time.Sleep(time.Second)
	}
}
