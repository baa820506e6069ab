module github.com/task-status-observer/bench/idle-clients

go 1.24

require github.com/gorilla/websocket v1.5.3
