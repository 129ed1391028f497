# Installs gputuned@.service, gputuned@.socket and the example config (run by `cmake --install`
# and by cpack, through install(SCRIPT)).
#
# The unit names gputuned and its config file by absolute path, and those
# depend on the prefix the files are installed under. cpack installs under
# CPACK_PACKAGING_INSTALL_PREFIX (/usr) whatever prefix the tree was configured
# with, so the paths are filled in here, at install time, not at configure
# time. Set by deploy/CMakeLists.txt before this runs:
#   GPUTUNE_DEPLOY_SOURCE_DIR  deploy/ in the source tree
#   GPUTUNE_DEPLOY_BINARY_DIR  deploy/ in the build tree (scratch files)
#   GPUTUNE_SBINDIR GPUTUNE_SYSCONFDIR GPUTUNE_DOCDIR GPUTUNE_UNITDIR
#                              GNUInstallDirs-style, relative to the prefix
#                              or absolute

function(gputune_full_path out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

# GNUInstallDirs' rule for etc/: /usr → /etc, /opt/<x> → /etc/opt/<x>.
if(IS_ABSOLUTE "${GPUTUNE_SYSCONFDIR}")
  set(sysconfdir "${GPUTUNE_SYSCONFDIR}")
elseif(CMAKE_INSTALL_PREFIX MATCHES "^/usr/?$")
  set(sysconfdir "/${GPUTUNE_SYSCONFDIR}")
elseif(CMAKE_INSTALL_PREFIX MATCHES "^/opt/")
  set(sysconfdir "/${GPUTUNE_SYSCONFDIR}${CMAKE_INSTALL_PREFIX}")
else()
  set(sysconfdir "${CMAKE_INSTALL_PREFIX}/${GPUTUNE_SYSCONFDIR}")
endif()
set(GPUTUNE_CONFDIR "${sysconfdir}/gputune")
gputune_full_path(GPUTUNE_SBINDIR "${GPUTUNE_SBINDIR}")
gputune_full_path(GPUTUNE_DOCDIR "${GPUTUNE_DOCDIR}")
gputune_full_path(unitdir "${GPUTUNE_UNITDIR}")

string(MD5 scratch "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
set(scratch "${GPUTUNE_DEPLOY_BINARY_DIR}/install-${scratch}")
foreach(unit gputuned@.service gputuned@.socket)
  configure_file("${GPUTUNE_DEPLOY_SOURCE_DIR}/systemd/${unit}.in"
                 "${scratch}/${unit}" @ONLY)
  file(INSTALL "${scratch}/${unit}" DESTINATION "${unitdir}")
endforeach()
file(REMOVE_RECURSE "${scratch}")

# An operator's edited config survives a reinstall over it; packages carry it
# as a conffile instead.
set(shipped "${GPUTUNE_DEPLOY_SOURCE_DIR}/gputuned.conf")
set(installed "$ENV{DESTDIR}${GPUTUNE_CONFDIR}/gputuned.conf")
set(keep FALSE)
if(EXISTS "${installed}")
  file(READ "${installed}" installed_text)
  file(READ "${shipped}" shipped_text)
  if(NOT installed_text STREQUAL shipped_text)
    set(keep TRUE)
  endif()
endif()
if(keep)
  message(STATUS "Keeping: ${installed} (edited; the default is ${shipped})")
else()
  file(INSTALL "${shipped}" DESTINATION "${GPUTUNE_CONFDIR}")
endif()
