# kernels/local.mk: (automake fragment, included by Makefile.am)
