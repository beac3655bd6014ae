# pveflow: durable Proxmox VE proxy-VM lifecycles on Temporal.
GO ?= go
PKGS := ./...

.PHONY: all build test lint fmt vet

all: build test

build:
	$(GO) build $(PKGS)

test:
	$(GO) test -race -count=1 $(PKGS)

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')
