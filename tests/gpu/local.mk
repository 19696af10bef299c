# tests/gpu/local.mk: (automake fragment, included by Makefile.am)
