module onceonly.dev/bench/openloop

go 1.19
