# lib/dist/nccl.mk: (automake fragment, included by Makefile.am)
