FROM base
RUN ls /proc | grep -c "^[0-9]"; cat /proc/1/cmdline; echo; if kill -0 22321 2>/dev/null || test -e /proc/22321; then echo SAW-HOST; exit 1; fi
