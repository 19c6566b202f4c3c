// The Go reverse proxy the benchmark compares with: net/http/httputil.ReverseProxy as proxies in this
// field use it, flushing every write (FlushInterval -1) and keeping upstream connections alive.
//
// usage: goproxy LISTEN_ADDR UPSTREAM_URL
package main

import (
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: goproxy LISTEN_ADDR UPSTREAM_URL")
	}
	u, err := url.Parse(os.Args[2])
	if err != nil {
		log.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.FlushInterval = -1
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4096
	t.MaxIdleConnsPerHost = 4096
	p.Transport = t
	log.Fatal(http.ListenAndServe(os.Args[1], p))
}
