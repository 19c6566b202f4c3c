module modelgate/bench/goproxy

go 1.19
