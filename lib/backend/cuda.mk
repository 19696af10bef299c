# lib/backend/cuda.mk: (automake fragment, included by Makefile.am)
